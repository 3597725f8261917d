"""Lifecycle: SIGTERM with parked joins answers them with NOT_COORDINATOR, flushes the log and exits
0 within the deadline; a restart on the same data dir recovers the same groups and offsets; logs
are JSON lines with --log-format json; a second signal and an overdue shutdown force the exit."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from coordinator.serve import lifecycle
from coordinator.tools import groups as groups_cli
from tests.support import durability_util as du
from tests.support import ops_util
from tests.support import realclients as rc
from tests.support.durability_util import RawConn

GROUP = "lifecycle"
TOPIC = "orders"
# The server's own shutdown deadline: past it, its watchdog exits with code 1 (coordinator/
# lifecycle.py), so exit code 0 is what proves the stop finished in time; no wall clock is read.
# Generous, so a loaded machine does not trip the watchdog.
DEADLINE_MS = 15_000


async def _describe(proc: ops_util.Proc) -> groups_cli.GroupView:
    return await groups_cli.describe_group("127.0.0.1", proc.port, GROUP, timeout_s=20)


async def test_sigterm_with_parked_joins_exits_0_and_restart_recovers(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    options = {"shutdown_timeout_ms": DEADLINE_MS, "log_format": "json"}
    first = ops_util.start(tmp_path, data_dir, {TOPIC: 4}, options)
    conns: list[RawConn] = []
    try:
        # A Stable group of one, generation 1, with committed offsets.
        leader, leader_id, generation = await ops_util.stable_member(
            GROUP, TOPIC, [0, 1, 2, 3], "127.0.0.1", first.port
        )
        conns.append(leader)
        body = du.offset_commit_v2(
            GROUP, TOPIC, {0: 10, 1: 11, 2: 12, 3: 13}, generation=generation, member_id=leader_id
        )
        errors = du.decode_commit_v2(await leader.request(du.OFFSET_COMMIT, 2, body))
        assert errors == {0: 0, 1: 0, 2: 0, 3: 0}
        before = await _describe(first)
        assert before.state == "Stable" and [m.member_id for m in before.members] == [leader_id]

        # Two new members join: a rebalance starts and their JoinGroups park, waiting for the
        # leader to rejoin (it never does before the SIGTERM).
        parked = []
        for _ in range(2):
            conn = await RawConn.open("127.0.0.1", first.port)
            conns.append(conn)
            member_id = await ops_util.member_id_for(conn, GROUP, [TOPIC])
            await ops_util.send_join(conn, GROUP, [TOPIC], member_id, rebalance_timeout_ms=60_000)
            parked.append(conn)

        async def preparing() -> bool:
            view = await _describe(first)
            return view.state == "PreparingRebalance"

        await rc.wait_until(preparing, 10, "the rebalance to start", explain=first.log)

        first.signal(signal.SIGTERM)
        for conn in parked:  # each parked JoinGroup is answered, with NOT_COORDINATOR
            body = await ops_util.answer(conn, timeout=DEADLINE_MS / 1000)
            assert int.from_bytes(body[4:6], "big") == ops_util.NOT_COORDINATOR
        try:
            code = await asyncio.to_thread(first.proc.wait, DEADLINE_MS / 1000 + 15)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {DEADLINE_MS // 1000 + 15}s after SIGTERM\n{first.log()}")
        # 0, not the watchdog's 1: the graceful stop finished within the server's deadline.
        assert code == 0, first.log()
        assert "did not finish" not in first.log(), first.log()

        # Logs: stderr, one JSON object per line, the signal named.
        lines = [json.loads(line) for line in first.log().splitlines() if line.strip()]
        assert all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)
        assert any("SIGTERM" in line["msg"] for line in lines)
        # The rebalance line's fields are keys of its JSON object (coordinator/serve/status.py).
        assert any(
            line.get("group_id") == GROUP and line.get("generation_id") == 1 and "cause" in line
            for line in lines
        ), lines
    finally:
        for conn in conns:
            conn.close()
        first.kill()

    # Restart on the same data dir: the group as it was before the rebalance (the rebalance in
    # flight is lost, as in Kafka), and every committed offset.
    second = ops_util.start(tmp_path, data_dir, {TOPIC: 4}, tag="-restart")
    try:

        async def loaded() -> groups_cli.GroupView:
            return await _describe(second)

        after: groups_cli.GroupView = await rc.wait_until(
            loaded, 20, "the restarted server to describe the group", explain=second.log
        )
        assert after.state == "Stable"
        assert after.protocol_type == "consumer" and after.protocol == "range"
        assert [(m.member_id, m.assignment) for m in after.members] == [
            (leader_id, {TOPIC: [0, 1, 2, 3]})
        ]
        assert after.offsets == {TOPIC: {0: 10, 1: 11, 2: 12, 3: 13}}
        assert generation == 1
    finally:
        second.kill()
    assert second.proc.returncode is not None


async def test_sigterm_while_idle_exits_0_and_plain_logs(tmp_path: Path) -> None:
    proc = ops_util.start(tmp_path, tmp_path / "data", {TOPIC: 1}, {"log_format": "plain"})
    try:
        proc.signal(signal.SIGINT)
        code = await asyncio.to_thread(proc.proc.wait, 10)
        assert code == 0, proc.log()
        text = proc.log()
        assert "INFO groupcoord: received SIGINT: shutting down" in text
        assert "INFO groupcoord: stopped" in text
    finally:
        proc.kill()


# -- the signal logic itself, in-process: deterministic where a real process would race ---------


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    codes: list[int] = []
    monkeypatch.setattr(lifecycle, "_exit", codes.append)
    return codes


async def test_second_signal_forces_exit(exits: list[int]) -> None:
    signals = lifecycle.Signals(deadline_ms=60_000)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(signals.stopping.wait(), 5)
        assert exits == []
        os.kill(os.getpid(), signal.SIGTERM)
        await rc.wait_until(lambda: exits, 5, "the forced exit")
        assert exits == [128 + signal.SIGTERM]
    finally:
        signals.close()
    # No watchdog outlives close(): a leaked one would call the real os._exit(1) in this process
    # a deadline later, whatever test is running then.
    await rc.wait_until(lambda: not watchdogs(), 5, "every watchdog timer to end")


def watchdogs() -> list[threading.Thread]:
    # By name: other Timers run in this process (pytest-timeout's, one per test).
    return [t for t in threading.enumerate()
            if t.name == lifecycle.WATCHDOG_THREAD and t.is_alive()]


async def test_overdue_shutdown_exits_1(exits: list[int]) -> None:
    signals = lifecycle.Signals(deadline_ms=50)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.wait_for(signals.stopping.wait(), 5)
        await rc.wait_until(lambda: exits, 5, "the watchdog")
        assert exits == [1]
    finally:
        signals.close()


def test_json_formatter_keeps_extra_fields() -> None:
    record = logging.LogRecord("groupcoord.x", logging.INFO, "f", 1, "rebalanced %s", ("g",), None)
    record.group_id = "g"
    record.generation_id = 3
    entry = json.loads(lifecycle.JsonFormatter().format(record))
    assert entry["msg"] == "rebalanced g" and entry["level"] == "INFO"
    assert entry["group_id"] == "g" and entry["generation_id"] == 3
    plain = lifecycle.PlainFormatter().format(record)
    assert plain.endswith("groupcoord.x: rebalanced g group_id=g generation_id=3")
