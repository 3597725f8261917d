"""Issue 3, "Restart with real clients": aiokafka and confluent-kafka consumers commit known
offsets, the server is SIGKILLed and restarted on the same data dir and port, and the group comes
back: OffsetFetch, each client's committed() and (after a rebalance) position(), and
DescribeGroups all show exactly what was there before the kill.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from tests.support import durability_util as du
from tests.support.realclients import describe_confluent, explain_members, partition_of, wait_until

pytestmark = pytest.mark.clients

TOPIC = "dur"
PARTITIONS = 6
GROUP = "g-durable"


def expected_offset(p: int) -> int:
    return 1000 + 111 * p + 7  # distinct per partition, never a client default


async def test_group_and_offsets_survive_sigkill(tmp_path):
    srv = du.ServerProc.create(tmp_path, {TOPIC: PARTITIONS})
    ms = []
    try:
        srv.start()
        await srv.wait_loaded(TOPIC)
        for kind, name in (("aiokafka", "aio-0"), ("aiokafka", "aio-1"), ("confluent", "rdk-0")):
            ms.append(await du.start_committer_member(tmp_path, kind, name,
                                                      bootstrap=srv.bootstrap, group=GROUP,
                                                      topic=TOPIC))

        def split() -> bool:
            for m in ms:
                assert m.running(), f"{m.name} exited\n{m.log_tail()}"
            return partition_of(ms, PARTITIONS) and all(m.member_id for m in ms)

        await wait_until(split, 40, "3 members to split 6 partitions",
                         explain=lambda: explain_members(ms))
        # Once DescribeGroups agrees with the clients, every member has finished SyncGroup.
        before = await wait_until(
            lambda: _described_as(srv.bootstrap, {m.member_id: m.owned for m in ms}), 20,
            "DescribeGroups to agree with the clients", interval=0.3,
            explain=lambda: explain_members(ms))

        expected = {p: expected_offset(p) for p in range(PARTITIONS)}
        for m in ms:
            assert m.owned
            offsets = {str(p): expected[p] for p in sorted(m.owned)}
            ev = await du.ask(m, {"cmd": "commit", "offsets": offsets}, "committed",
                              accept=("commit_failed",))
            assert ev["event"] == "committed", (m.name, ev, m.log_tail())
        assert await du.fetch_committed(srv.host, srv.port, GROUP, TOPIC,
                                        list(range(PARTITIONS))) == expected

        srv.kill9()
        srv.start()  # same data dir, same port
        await srv.wait_loaded(TOPIC)

        # The restored group: same members, same assignments, same protocol.
        after = await wait_until(
            lambda: _described_as(srv.bootstrap, before.members), 20,
            "DescribeGroups to show the restored group", interval=0.3,
            explain=lambda: explain_members(ms) + "\n" + srv.log_tail())
        assert after.protocol == "range"
        assert after.client_ids == before.client_ids
        assert await du.fetch_committed(srv.host, srv.port, GROUP, TOPIC,
                                        list(range(PARTITIONS))) == expected
        for m in ms:
            ev = await du.ask(m, {"cmd": "report"}, "report", accept=("report_failed",))
            assert ev["event"] == "report", (m.name, ev)
            assert {int(p): o for p, o in ev["committed"].items()} == {
                p: expected[p] for p in m.owned}, (m.name, ev)

        # A new member makes everyone rejoin: each client then starts from the committed offsets.
        joined_at = time.monotonic()
        ms.append(await du.start_committer_member(tmp_path, "confluent", "rdk-1",
                                                  bootstrap=srv.bootstrap, group=GROUP,
                                                  topic=TOPIC))

        def rebalanced() -> bool:
            for m in ms:
                assert m.running(), f"{m.name} exited\n{m.log_tail()}"
            fresh = all(any(e["event"] == "assigned" for e in m.events_since(joined_at))
                        for m in ms)
            return fresh and partition_of(ms, PARTITIONS)

        await wait_until(rebalanced, 40, "4 members to rebalance 6 partitions",
                         explain=lambda: explain_members(ms) + "\n" + srv.log_tail())
        await wait_until(lambda: _described_as(srv.bootstrap, {m.member_id: m.owned for m in ms}),
                         20, "DescribeGroups to agree after the rebalance", interval=0.3,
                         explain=lambda: explain_members(ms))

        mismatches: list[object] = []

        async def resumed() -> bool:
            mismatches.clear()
            for m in ms:
                ev = await du.ask(m, {"cmd": "report"}, "report", accept=("report_failed",))
                if ev["event"] != "report":
                    return False
                want = {p: expected[p] for p in m.owned or ()}
                got_committed = {int(p): o for p, o in ev["committed"].items()}
                got_position = {int(p): o for p, o in ev["position"].items()}
                assert got_committed == want, (m.name, ev)
                # confluent reports no position until it has fetched; it is never anything else.
                if got_position != want:
                    mismatches.append((m.name, ev))
            return not mismatches

        await wait_until(resumed, 30, "every client to resume at the committed offsets",
                         interval=0.5,
                         explain=lambda: f"mismatches: {mismatches}\n" + explain_members(ms))
    finally:
        for m in ms:
            m.kill()
        for m in ms:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(m.proc.wait(), 10)
            if m.reader is not None:
                m.reader.cancel()
        srv.stop()


async def _described_as(bootstrap: str, members: dict) -> object:
    view = await asyncio.to_thread(describe_confluent, bootstrap, GROUP)
    return view if view.state == "STABLE" and view.members == members else None
