"""tests/support/cli_zygote.py: a forked run of the CLI answers as `python -m coordinator.cli`
does (exit code, stdout, stderr, the caller's environment and working directory), and a run
whose import-time environment differs is a real `python -m`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import cli_zygote
from tests.support.realclients import REPO, free_port


def real(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "coordinator.cli", *args], check=False,
                          capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=dict(os.environ, **(env or {})))  # fmt: skip


def test_a_forked_run_answers_as_python_m_does() -> None:
    closed = f"127.0.0.1:{free_port()}"
    cases: list[tuple[list[str], dict[str, str] | None]] = [
        (["groups", "--help"], None),  # exit 0, usage on stdout
        (["nosuch"], None),  # argparse: exit 2, usage on stderr
        (["groups", "list", "--bootstrap-server", closed, "--timeout-ms", "500"], None),
        (["serve", "--listen", "x"], {"GROUPCOORD_SESSION_TIMEOUT_MIN_MS": "oops"}),  # env read
    ]
    for args, env in cases:
        forked = cli_zygote.run_cli(args, REPO, 60, env)
        expected = real(args, env)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            expected.returncode, expected.stdout, expected.stderr), args  # fmt: skip


def test_a_timeout_kills_the_run_and_the_helper_serves_on(tmp_path: Path) -> None:
    # `serve` never ends by itself: the run is killed at its timeout, as subprocess.run does.
    args = ["serve", "--listen", f"127.0.0.1:{free_port()}", "--metrics-listen", ""]
    try:
        cli_zygote.run_cli([*args, "--data-dir", str(tmp_path / "data")], REPO, 3)
    except subprocess.TimeoutExpired:
        pass
    else:
        raise AssertionError("serve ended within 3 s")
    assert cli_zygote.run_cli(["nosuch"], REPO, 60).returncode == 2
