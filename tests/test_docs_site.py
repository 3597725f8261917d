"""The documentation: the site builds strictly, its generated tables are current, it speaks to a
user (no internal work items), and the README's quick start runs as written.

- The site (mkdocs.yml, docs/) is built with `mkdocs build --strict` into a temporary directory:
  mkdocs.yml's `validation` turns a link to a missing page, a link to a missing anchor of another
  page, and a page left out of the navigation into warnings, and strict mode into failures. A
  second build of a copy with a broken anchor shows the check is live.
- The quick start: `make run`'s own command line (read with `make -n run`, so a change of its
  defaults reaches this test) starts a real `groupcoord serve` on free ports, and the README's
  first Python block runs against it, unchanged but for the port.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.serve import config
from protocol import apis
from tests.support import docs_tables, ops_util
from tests.support import realclients as rc

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
README = REPO / "README.md"
QUICK_START_BOOTSTRAP = "127.0.0.1:9092"


# -- the site ---------------------------------------------------------------------------------


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site),
         "--config-file", str(project / "mkdocs.yml")],
        check=False, capture_output=True, text=True, timeout=300, cwd=project,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
    )  # fmt: skip


def copy_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(DOCS, project / "docs")
    shutil.copy(REPO / "mkdocs.yml", project / "mkdocs.yml")
    return project


def test_the_site_builds_strictly_with_every_link_and_anchor_resolved(tmp_path: Path) -> None:
    out = build(REPO, tmp_path / "site")
    assert out.returncode == 0, out.stderr
    assert "WARNING" not in out.stderr, out.stderr
    pages = {p.relative_to(tmp_path / "site").as_posix()
             for p in (tmp_path / "site").rglob("index.html")}  # fmt: skip
    for md in DOCS.glob("*.md"):
        expected = "index.html" if md.stem == "index" else f"{md.stem}/index.html"
        assert expected in pages, md.name


@pytest.mark.parametrize(
    ("link", "complaint"),
    [
        ("[x](sidecar.md#no-such-heading)", "no-such-heading"),
        ("[x](no-such-page.md)", "no-such-page.md"),
    ],
)
def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path, link: str, complaint: str) -> None:
    project = copy_project(tmp_path)
    page = project / "docs" / "concepts.md"
    page.write_text(page.read_text() + f"\nSee {link}.\n")
    out = build(project, tmp_path / "site")
    assert out.returncode != 0
    assert complaint in out.stderr, out.stderr


def test_the_generated_reference_tables_are_current() -> None:
    assert docs_tables.stale_pages() == [], "run: python -m tests.support.docs_tables"
    page = (DOCS / "configuration.md").read_text()
    for s in config.SETTINGS:
        assert f"`{s.flag}" in page and s.env in page, s.name
    compatibility = (DOCS / "compatibility.md").read_text()
    for spec in apis.API_TABLE:
        assert f"({spec.api_key}) | " in compatibility, spec.name


def test_a_stale_table_is_noticed(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    page = docs / "configuration.md"
    page.write_text(page.read_text().replace("| `--listen HOST:PORT` |", "| `--lisen HOST:PORT` |"))
    assert docs_tables.stale_pages(docs) == ["configuration.md"]


_METRIC = re.compile(r'"(groupcoord_[a-z0-9_]+)"')
_DOCUMENTED = re.compile(r"`(groupcoord_[a-z0-9_]+)`")


def test_every_metric_is_documented_and_every_documented_metric_exists() -> None:
    """The metrics are defined in several modules (the server's, the sidecar's, the fleet's), so
    the page is checked against every `"groupcoord_..."` name in the code, both ways."""
    sources = [*(REPO / "coordinator").rglob("*.py"), *(REPO / "storage").rglob("*.py")]
    defined = {m for path in sources for m in _METRIC.findall(path.read_text())}
    page = (DOCS / "metrics.md").read_text()
    documented = {name.removesuffix("_total") for name in _DOCUMENTED.findall(page)}
    assert defined - documented == set(), "metrics missing from docs/metrics.md"
    assert documented - defined == set(), "docs/metrics.md names metrics the code does not have"


# -- written for a user -------------------------------------------------------------------------

# What a reader outside the project cannot follow: work items and internal documents.
INTERNAL = re.compile(
    r"\bseed \d{3}\b|\bissues? \d+\b|\bMarshal\b|\bsession \d+\b|README \"|this project's",
    re.IGNORECASE,
)


def user_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_no_page_refers_to_internal_work_items() -> None:
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()}"
             for p in user_pages()
             for n, line in enumerate(p.read_text().splitlines(), start=1)
             if INTERNAL.search(line)]  # fmt: skip
    assert not found, "\n".join(found)


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)", text):
        assert (REPO / target).exists(), target
    for page in DOCS.glob("*.md"):  # every page is reachable from the front page
        assert page.name == "index.md" or f"docs/{page.name}" in text, page.name
    for fact in ("make run", "make test", "make clean", "3.11", ".venv/bin/groupcoord"):
        assert fact in text, fact


# -- the quick start ----------------------------------------------------------------------------


def make_run_command(port: int, metrics_port: int, data_dir: Path) -> list[str]:
    """`make run`'s `groupcoord serve` command line, with its defaults, on our ports and dir."""
    out = subprocess.run(
        ["make", "-s", "-n", "run", "BIN=/bin", f"LISTEN=127.0.0.1:{port}", f"DATA={data_dir}",
         f"METRICS=127.0.0.1:{metrics_port}"],
        check=True, capture_output=True, text=True, cwd=REPO, timeout=60,
    ).stdout  # fmt: skip
    lines = out.replace("\\\n", " ").splitlines()
    (serve,) = [line for line in lines if line.startswith("/bin/groupcoord serve")]
    return [sys.executable, "-m", "coordinator.cli", *shlex.split(serve)[1:]]


def first_python_block(page: Path) -> str:
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.DOTALL)
    assert blocks, f"{page.name} has no Python block"
    return str(blocks[0])


def readme_python() -> str:
    snippet = first_python_block(README)
    assert QUICK_START_BOOTSTRAP in snippet
    return snippet


def test_the_site_home_page_shows_the_same_quick_start() -> None:
    assert first_python_block(DOCS / "index.md") == readme_python()


@pytest.mark.clients
def test_the_readme_quick_start_runs_against_make_run(tmp_path: Path) -> None:
    port, metrics_port = rc.free_port(), rc.free_port()
    command = make_run_command(port, metrics_port, tmp_path / "data")
    assert "--topic" in command, "make run declares no topic for the quick start"
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                  stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    proc = ops_util.Proc(port, tmp_path / "data", server, log_path, metrics_port)
    try:
        rc.wait_until_sync(lambda: not proc.alive() or rc.can_connect("127.0.0.1", port), 30,
                           "groupcoord to listen")  # fmt: skip
        assert proc.alive(), proc.log()
        script = tmp_path / "quickstart.py"
        script.write_text(readme_python().replace(QUICK_START_BOOTSTRAP, f"127.0.0.1:{port}"))
        out = subprocess.run([sys.executable, str(script)], check=False, capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert "partitions of orders this member owns: [0, 1, 2]" in out.stdout, (
            out.stdout + out.stderr + proc.log()
        )
        described = ops_util.groupcoord_cli("groups", "describe", "workers", "--state",
                                            "--bootstrap-server", proc.bootstrap)  # fmt: skip
        assert described.returncode == 0 and "workers" in described.stdout, described
    finally:
        proc.kill()
