"""`groupcoord serve --workers N`: N sidecar fleet members on one host, one per core.

One Python process serves one core. A second process on the same host used to be a second pod's
sidecar; here the parent starts N workers, each a whole fleet member (its own member id, its own
share of the state partitions, its own fleet listener), that share the client port and the
fixed broker ports (`--broker-port-base`) with SO_REUSEPORT: the kernel spreads the clients'
connections over them. FindCoordinator names the node of the worker owning a group
(coordinator.sidecar.worker_nodes), so clients send its requests there; one that still reaches
another worker is forwarded over the fleet listener, as between pods (docs/sidecar.md, "More
than one core").

What the parent does (an operator's expectations of one process):
- It binds one listening socket per worker before starting them, keeps them all its life, and
  passes worker i its own, the same one again after a restart: worker i's coordinator node.
- Worker i gets the settings of the parent, with `--fleet-listen` and `--metrics-listen` on the
  configured port + i (port 0 stays 0), `--fleet-advertise` likewise; the environment variable
  `GROUPCOORD_WORKER_INDEX` makes its client and broker listeners share their ports
  (coordinator.serve.listener.share_ports).
- SIGTERM/SIGINT reach every worker (the parent forwards them); each stops as one sidecar stops
  (leaves the fleet, drains), and the parent exits 0 once all have, or 1 if any exited badly.
- A worker that dies on its own (kill -9, the OOM killer) is started again at once: its groups
  move to the other members meanwhile, as after any member's death. A worker that exits with
  the configuration error code (2), or more than `MAX_RESTARTS` restarts within
  `RESTART_WINDOW_S`, stops the others and the parent exits non-zero, so the orchestrator sees
  the pod fail instead of a restart loop hidden inside it.
- Each worker's log lines carry `worker=i` (they share the parent's stderr).
- SIGHUP is forwarded too (each worker reloads its certificates).
- Each worker is a process group of its own, so a terminal's Ctrl-C (sent to the foreground
  group) reaches it once, through the parent, not twice (a second signal stops at once); on
  Linux it gets SIGKILL if the parent dies (PR_SET_PDEATHSIG), so a kill -9 of the parent
  leaves no worker behind holding the ports.

Invariants:
- Every worker pid the parent started is reaped by it; the parent never exits before them.
- No worker is started after the first stop signal.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from coordinator.serve.addresses import parse_host_port
from coordinator.sidecar import worker_nodes
from coordinator.sidecar.fleet import fleet_listen_address

log = logging.getLogger("groupcoord.workers")

WORKER_ENV = worker_nodes.WORKER_ENV
EXIT_CONFIG = 2  # the CLI's exit code for a bad setting: restarting cannot help
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
_PR_SET_PDEATHSIG = 1
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _die_with_parent() -> None:
    """In the worker, before exec: SIGKILL when the parent dies (Linux's prctl; elsewhere an
    orphaned worker keeps serving until it is stopped)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def worker_index() -> int | None:
    """This process's index among `serve --workers N`'s workers, or None (not a worker)."""
    return worker_nodes.index()


def tag_logs(index: int) -> None:
    """Every log line of worker `index` says `worker=index` (the workers share the parent's
    stderr): an extra field, appended by the plain format and a key of the JSON one."""

    def tag(record: logging.LogRecord) -> bool:
        record.worker = index
        return True

    for handler in logging.getLogger().handlers:
        handler.addFilter(tag)


def _shifted(address: str, i: int) -> str:
    host, port = parse_host_port(address)
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port + i if port else 0}"


def worker_args(settings: Any, i: int) -> list[str]:
    """The flags that make worker i differ from the parent's settings (appended last: a flag
    given later wins, and flags win over the environment and the file)."""
    advertise = parse_host_port(settings.fleet_advertise) if settings.fleet_advertise else None
    host, port = fleet_listen_address(settings.fleet_listen, advertise, settings.listen)
    shown = f"[{host}]" if ":" in host else host
    args = ["--workers", "1", "--fleet-listen", _shifted(f"{shown}:{port}", i)]
    args += ["--metrics-listen", _shifted(settings.metrics_listen, i)]
    if settings.fleet_advertise:
        args += ["--fleet-advertise", _shifted(settings.fleet_advertise, i)]
    return args


@dataclass(slots=True)
class Supervisor:
    """Starts, watches and stops the workers; `run` returns the parent's exit code."""

    argv: Sequence[str]  # the parent's own command words, from `serve` on
    settings: Any
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)  # index -> worker
    restarts: list[float] = field(default_factory=list)
    nodes: list[socket.socket] = field(default_factory=list)  # each worker's node listener
    stopping: bool = False
    failed: bool = False

    def start(self, i: int) -> None:
        cmd = [sys.executable, "-m", "coordinator.cli", *self.argv]
        cmd += worker_args(self.settings, i)
        env = dict(os.environ, **{WORKER_ENV: str(i)})
        env.update(worker_nodes.worker_env(self.nodes, i) if self.nodes else {})
        proc = subprocess.Popen(
            cmd,
            env=env,
            pass_fds=(self.nodes[i].fileno(),) if self.nodes else (),
            stdin=subprocess.DEVNULL,
            process_group=0,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 (the parent runs no threads)
        )
        self.procs[i] = proc
        log.info("worker %d started (pid %d)", i, proc.pid)

    def _signalled(self, signum: int, _frame: FrameType | None) -> None:
        if signum != signal.SIGHUP:
            self.stopping = True
        self._send(signum)

    def _send(self, signum: int) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)

    def _reaped(self, pid: int, status: int) -> None:
        i = next((i for i, p in self.procs.items() if p.pid == pid), None)
        if i is None:
            return  # not a worker (cannot happen: the parent starts nothing else)
        proc = self.procs[i]
        proc.returncode = os.waitstatus_to_exitcode(status)
        code = proc.returncode
        if self.stopping:
            if code != 0:
                self.failed = True
            log.info("worker %d (pid %d) stopped (exit code %d)", i, pid, code)
            return
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW_S] + [now]
        if code == EXIT_CONFIG or len(self.restarts) > MAX_RESTARTS:
            log.error(
                "worker %d (pid %d) exited (code %d)%s; stopping the other workers",
                i,
                pid,
                code,
                "" if code == EXIT_CONFIG else f", {len(self.restarts)} times in a minute",
            )
            self.failed = True
            self.stopping = True
            self._send(signal.SIGTERM)
            return
        log.warning("worker %d (pid %d) died (code %d); starting it again", i, pid, code)
        self.start(i)

    def run(self) -> int:
        for signum in _FORWARDED:
            signal.signal(signum, self._signalled)
        host = parse_host_port(self.settings.listen)[0]
        try:
            self.nodes = worker_nodes.bind_sockets(host, self.settings.workers)
        except OSError as exc:
            log.error("cannot listen for the workers' coordinator nodes on %s: %s", host, exc)
            return EXIT_CONFIG
        for i in range(self.settings.workers):
            if not self.stopping:
                self.start(i)
        while any(p.returncode is None for p in self.procs.values()):
            try:
                pid, status = os.wait()  # a signal runs its handler, then the wait resumes
            except ChildProcessError:
                break
            self._reaped(pid, status)
        log.info("all workers stopped")
        for sock in self.nodes:
            sock.close()
        return 1 if self.failed else 0


def supervise(argv: Sequence[str], settings: Any) -> int:
    """Run `serve`'s workers until they stop; the parent's exit code."""
    return Supervisor(argv, settings).run()
