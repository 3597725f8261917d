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


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("core/group.py", "import asyncio", "The pure core imports nothing above it, and no I/O"),
        ("serve/server.py", "import coordinator.sidecar.upstream",
         "The sidecar may use the server, never the reverse"),
        ("serve/addresses.py", "import coordinator.serve.config",  # config imports addresses
         "No import cycles among the modules of a package"),
    ],
)
def test_a_violation_breaks_its_contract(tree: Path, module: str, line: str, contract: str) -> None:
    add_import(tree / "coordinator" / module, f"{line}  # noqa")
    out = lint(tree)
    assert out.returncode != 0
    assert f"{contract} BROKEN" in out.stdout, out.stdout
