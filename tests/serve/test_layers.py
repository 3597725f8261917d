"""The layer contracts (pyproject.toml [tool.importlinter], run by `make test`) can fail: a copy of
the tree in which a core module imports asyncio, or the server imports the sidecar, breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = ("coordinator", "protocol", "storage", "pipeline")


def lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], check=False, cwd=tree, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    if not LINT_IMPORTS.exists():
        pytest.skip("lint-imports is not installed (the test extra installs it)")
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def add_import(path: Path, line: str) -> None:
    text = path.read_text()
    marker = "from __future__ import annotations\n"
    path.write_text(text.replace(marker, marker + line + "\n", 1))


def test_the_tree_keeps_every_contract(tree: Path) -> None:
    out = lint(tree)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_a_core_module_importing_asyncio_breaks_the_core_contract(tree: Path) -> None:
    add_import(tree / "coordinator" / "core" / "group.py", "import asyncio  # noqa")
    out = lint(tree)
    assert out.returncode != 0
    assert "The pure core imports nothing above it, and no I/O BROKEN" in out.stdout, out.stdout


def test_the_server_importing_the_sidecar_breaks_its_contract(tree: Path) -> None:
    server = tree / "coordinator" / "serve" / "server.py"
    add_import(server, "import coordinator.sidecar.upstream  # noqa")
    out = lint(tree)
    assert out.returncode != 0
    assert "The sidecar may use the server, never the reverse BROKEN" in out.stdout, out.stdout


def test_a_cycle_breaks_the_acyclic_contract(tree: Path) -> None:
    addresses = tree / "coordinator" / "serve" / "addresses.py"
    add_import(addresses, "import coordinator.serve.config  # noqa")
    out = lint(tree)
    assert out.returncode != 0
    assert "No import cycles among the modules of a package BROKEN" in out.stdout, out.stdout
