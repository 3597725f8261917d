"""Helpers for the operability tests (lifecycle, groups CLI, deploy): a `groupcoord serve` process
on a chosen data dir that can be signalled and restarted, and a raw-protocol classic-group member
(bench/wire.py's hand-written codec: independent of the server's own codec).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import wire
from tests.support import cli_zygote
from tests.support import realclients as rc
from tests.support.durability_util import RawConn

REPO = rc.REPO
MEMBER_ID_REQUIRED = 79
COORDINATOR_LOAD_IN_PROGRESS = 14
NOT_COORDINATOR = 16
REBALANCE_IN_PROGRESS = 27


@dataclass
class Proc:
    """One `groupcoord serve` run; `stderr` is its log (plain or JSON lines)."""

    port: int
    data_dir: Path
    proc: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def metrics_text(self) -> str:
        assert self.metrics_port is not None
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())


def start(
    tmp: Path,
    data_dir: Path,
    topics: dict[str, int],
    options: dict[str, Any] | None = None,
    *,
    metrics: bool = False,
    env: dict[str, str] | None = None,
    tag: str = "",
) -> Proc:
    """Start `python -m coordinator.cli serve` (the console script's entry point) and wait until
    it accepts connections and has loaded its log."""
    port = rc.free_port()
    metrics_port = rc.free_port() if metrics else None
    opts: dict[str, Any] = {
        "initial_rebalance_delay_ms": 0,
        "session_timeout_min_ms": 1000,
        "session_timeout_max_ms": 300000,
        "metrics_listen": f"127.0.0.1:{metrics_port}" if metrics else "",
    }
    opts.update(options or {})
    cmd = rc.groupcoord_command(port, data_dir, topics, opts, [])
    log_path = tmp / f"groupcoord-{port}{tag}.log"
    full_env = dict(os.environ, **(env or {}))
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
            start_new_session=True, env=full_env,
        )  # fmt: skip
    p = Proc(port, data_dir, proc, log_path, metrics_port)
    try:
        rc.wait_until_sync(
            lambda: not p.alive() or rc.can_connect("127.0.0.1", port), 20, "groupcoord to listen"
        )
        if not p.alive():
            raise AssertionError(f"groupcoord exited with {proc.returncode}\n{p.log()}")
        rc.wait_log_loaded(p.alive, log_path, port)
    except BaseException:
        p.kill()
        raise
    return p


def groupcoord_cli(
    *args: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `groupcoord ARGS` through the console script's module, capturing output: a process of
    its own, forked from one that imported coordinator.cli once (tests/support/cli_zygote.py)."""
    return cli_zygote.run_cli(list(args), REPO, timeout, env)


# ------------------------------------------------------------------- a raw classic-group member


async def request(conn: RawConn, call: tuple[int, int, bytes], timeout: float = 10) -> bytes:
    return await conn.request(call[0], call[1], call[2], timeout=timeout)


async def join(
    conn: RawConn,
    group: str,
    topics: list[str],
    member_id: str = "",
    *,
    session_timeout_ms: int = 30_000,
    rebalance_timeout_ms: int = 60_000,
) -> wire.JoinResponse:
    """JoinGroup v5, answering MEMBER_ID_REQUIRED once (KIP-394) as clients do, and retrying
    COORDINATOR_LOAD_IN_PROGRESS as they do: `start` returns once the server listens, which is
    before its log is loaded (docs/protocol.md §12.3)."""
    call = wire.join_group_v5(
        group, member_id, wire.subscription(topics), session_timeout_ms, rebalance_timeout_ms
    )
    response = wire.decode_join_v5(await request(conn, call, timeout=30))
    loaded_by = time.monotonic() + 20
    while response.error_code == COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < loaded_by:
        await asyncio.sleep(0.05)  # a client's retry backoff
        response = wire.decode_join_v5(await request(conn, call, timeout=30))
    if response.error_code == MEMBER_ID_REQUIRED:
        return await join(
            conn, group, topics, response.member_id,
            session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
        )  # fmt: skip
    return response


async def send_join(
    conn: RawConn, group: str, topics: list[str], member_id: str, rebalance_timeout_ms: int
) -> None:
    """Write a JoinGroup v5 without waiting for its answer (it parks); read it with `answer`."""
    api_key, version, body = wire.join_group_v5(
        group, member_id, wire.subscription(topics), 30_000, rebalance_timeout_ms
    )
    conn.correlation += 1
    conn.writer.write(wire.frame(api_key, version, body, conn.correlation))
    await conn.writer.drain()


async def answer(conn: RawConn, timeout: float = 10) -> bytes:
    head = await asyncio.wait_for(conn.reader.readexactly(4), timeout)
    data = await asyncio.wait_for(conn.reader.readexactly(int.from_bytes(head, "big")), timeout)
    assert int.from_bytes(data[:4], "big") == conn.correlation
    return data[4:]


async def member_id_for(conn: RawConn, group: str, topics: list[str]) -> str:
    """A JoinGroup with an empty member id: the id handed out with MEMBER_ID_REQUIRED."""
    call = wire.join_group_v5(group, "", wire.subscription(topics), 30_000, 60_000)
    response = wire.decode_join_v5(await request(conn, call))
    assert response.error_code == MEMBER_ID_REQUIRED, response
    return response.member_id


async def sync(
    conn: RawConn, group: str, generation_id: int, member_id: str,
    assignments: list[tuple[str, bytes]],
) -> tuple[int, bytes | None]:  # fmt: skip
    call = wire.sync_group_v3(group, generation_id, member_id, assignments)
    return wire.decode_sync_v3(await request(conn, call, timeout=30))


async def stable_member(
    group: str, topic: str, partitions: list[int], host: str, port: int
) -> tuple[RawConn, str, int]:
    """One member that joins alone (initial delay 0), leads, assigns itself `partitions` and
    syncs: the group is Stable. Returns (connection, member_id, generation_id)."""
    conn = await RawConn.open(host, port)
    joined = await join(conn, group, [topic])
    assert joined.error_code == 0 and joined.leader == joined.member_id, joined
    error, _ = await sync(
        conn, group, joined.generation_id, joined.member_id,
        [(joined.member_id, wire.assignment(topic, partitions))],
    )  # fmt: skip
    assert error == 0, error
    return conn, joined.member_id, joined.generation_id


async def wait_state(port: int, group: str, state: str, timeout: float = 10) -> None:
    """Until DescribeGroups (through `groupcoord groups`' client) reports `state`."""
    from coordinator.tools import groups as groups_cli

    async def reached() -> bool:
        view = await groups_cli.describe_group("127.0.0.1", port, group, timeout_s=5)
        return view.state == state

    await rc.wait_until(reached, timeout, f"group {group} to be {state}")
