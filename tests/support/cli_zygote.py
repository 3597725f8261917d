"""`python -m coordinator.cli ARGS` for the tests, without paying the interpreter's imports on
every run: one helper process imports coordinator.cli once, then forks a child per run.

A run costs a fork (milliseconds) instead of a start-up (about a second idle, several on a loaded
machine: kio, the core's messages; `make test` runs the CLI some hundred times). The child is a
process of its own, as `python -m` gives: argv[0] the module's file, the caller's environment and
working directory, stdin /dev/null, stdout and stderr to files read back, exit code from
`sys.exit(main())` (SystemExit's rules: None is 0, a message is printed and is 1, an uncaught
exception a traceback and 1), exit handlers run. The helper is single-threaded (fork is safe)
and ends when the test process closes its stdin (at exit, or when that process dies).

What forking cannot give is a fresh import: settings read at import time (PYTHONPATH, and
GROUPCOORD_TRACE_CONNECTIONS in coordinator/serve/trace.py) are the helper's. A run whose
environment differs from the helper's in one of those goes through a real `python -m` instead.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

IMPORT_TIME_ENV = ("PYTHONPATH", "GROUPCOORD_TRACE_CONNECTIONS", "PYTHONHASHSEED")

_HELPER = r"""
import atexit, json, os, sys, traceback
import coordinator.cli
CLI = coordinator.cli.__file__
replies = os.fdopen(os.dup(1), "w", buffering=1)
for line in sys.stdin:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            for fd, path in ((1, req["out"]), (2, req["err"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_TRUNC), fd)
            sys.stdin = open(0, closefd=False)
            sys.argv = [CLI, *req["args"]]
            try:
                code = coordinator.cli.main()
            except SystemExit as exc:
                code = exc.code
            except BaseException:
                traceback.print_exc()
                code = 1
            if code is None:
                code = 0
            elif not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
            atexit._run_exitfuncs()
        finally:
            try:
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(code & 0xFF)
    replies.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    replies.write(json.dumps({"code": os.waitstatus_to_exitcode(status)}) + "\n")
"""


class _Helper:
    def __init__(self, cwd: Path) -> None:
        self.env = dict(os.environ)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HELPER],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=cwd, env=self.env, text=True,
            bufsize=1,
        )  # fmt: skip
        self.lock = threading.Lock()
        self.buf = b""

    def fits(self, env: dict[str, str]) -> bool:
        return self.proc.poll() is None and all(
            env.get(k) == self.env.get(k) for k in IMPORT_TIME_ENV
        )

    def _reply(self, timeout: float | None) -> dict[str, int] | None:
        """The helper's next line, read from its fd (a buffered reader would hide a second
        line from select)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("the CLI helper process died")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return dict(json.loads(line))

    def run(
        self, args: list[str], env: dict[str, str], cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        assert self.proc.stdin is not None
        with self.lock, tempfile.TemporaryDirectory(prefix="gc-cli-") as tmp:
            out, err = Path(tmp, "out"), Path(tmp, "err")
            out.touch()
            err.touch()
            req = {"args": args, "env": env, "cwd": str(cwd), "out": str(out), "err": str(err)}
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            started = self._reply(60)
            assert started is not None, "the CLI helper did not fork"
            done = self._reply(timeout)
            if done is None:
                os.kill(started["pid"], 9)
                self._reply(None)
                raise subprocess.TimeoutExpired(args, timeout, out.read_text(), err.read_text())
            return subprocess.CompletedProcess(
                [sys.executable, "-m", "coordinator.cli", *args],
                done["code"], out.read_text(), err.read_text(),
            )  # fmt: skip

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_helpers: list[_Helper] = []  # the live one last
_start = threading.Lock()


def run_cli(
    args: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, -m, coordinator.cli, *args], capture_output=True, text=True)`."""
    full = dict(os.environ, **(env or {}))
    with _start:
        if not _helpers or _helpers[-1].proc.poll() is not None:
            _helpers.append(_Helper(cwd))
            atexit.register(_helpers[-1].close)
        helper = _helpers[-1]
    if not helper.fits(full):
        return subprocess.run(
            [sys.executable, "-m", "coordinator.cli", *args],
            check=False, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=full,
        )  # fmt: skip
    return helper.run(args, full, cwd, timeout)
