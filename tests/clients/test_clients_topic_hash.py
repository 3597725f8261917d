"""Issue 4 end to end: partitions added to a topic reach every consumer in one rebalance.

For each client kind (aiokafka, kafka-python, confluent-kafka, Java), one group of two consumers
shares a 4-partition topic, with `metadata.max.age.ms` (librdkafka: the topic metadata refresh
interval) left at the library's default of 5 minutes or more. Then, with that kind's own admin
client:
1. a change to an unrelated topic causes no rebalance (nobody's generation or assignment moves);
2. the shared topic is raised to 8 partitions: every consumer ends up with its share of 8 in the
   first generation after the change, one rebalance (the KIP-1101 trigger plus the
   NOT_LEADER_OR_FOLLOWER refresh signal, coordinator.broker.refresh_signal);
3. groupcoord is SIGKILLed and restarted on the same log: no rebalance follows.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from typing import Any

import pytest

from tests.support import durability_util as du
from tests.support.realclients import (
    Member,
    explain_members,
    kind_params,
    partition_of,
    require_kind,
    wait_until,
)

pytestmark = pytest.mark.clients

HEARTBEAT_MS = 1500
SESSION_MS = 10_000
SHARED, OTHER = "shared", "other"


def _raise_partitions(kind: str, bootstrap: str, topic: str, count: int, peers: Any) -> None:
    """CreatePartitions through the admin client of the same library as the consumers."""
    if kind == "java":
        classes = peers / "java" / "classes"
        jars = sorted(str(j) for j in (peers / "java" / "lib").glob("*.jar"))
        cp = os.pathsep.join([str(classes), *jars])
        out = subprocess.run(
            ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx128m", "-cp", cp,
             "AdminDriver", bootstrap, "create-partitions", topic, str(count)],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert json.loads(out.strip().splitlines()[-1]) == {"result": "OK"}, out
    elif kind == "confluent":
        from confluent_kafka.admin import AdminClient, NewPartitions

        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
        for future in admin.create_partitions([NewPartitions(topic, count)]).values():
            future.result(15)
    elif kind == "kafka-python":
        from kafka import KafkaAdminClient
        from kafka.admin import NewPartitions as KpNewPartitions

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        try:
            response = admin.create_partitions({topic: KpNewPartitions(count)})
            assert all(r.error_code == 0 for r in response.results), response
        finally:
            admin.close()
    else:

        async def run() -> None:
            from aiokafka.admin import AIOKafkaAdminClient
            from aiokafka.admin import NewPartitions as AioNewPartitions

            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                response = await admin.create_partitions({topic: AioNewPartitions(count)})
                assert all(e[1] == 0 for e in response.topic_errors), response
            finally:
                await admin.close()

        asyncio.run(run())


def _completed_rebalances(srv: du.ServerProc, group: str) -> list[tuple[int, str]]:
    """(generation, cause) of each rebalance the server logged as completed for `group`."""
    pattern = rf"rebalance completed group_id={re.escape(group)} generation_id=(\d+) cause=(\S+)"
    return [(int(g), c) for g, c in re.findall(pattern, srv.log_path.read_text())]


def _generations(ms: list[Member]) -> list[object]:
    return [(m.member_id, m.generation) for m in ms]


async def _no_rebalance_for(ms: list[Member], seconds: float, why: str, srv: du.ServerProc) -> None:
    """Nothing moves for `seconds`: no assignment event, the same member ids and generations."""
    since = time.monotonic()
    before = _generations(ms)
    await asyncio.sleep(seconds)  # a negative check: it must hold for the whole window
    moved = [(m.name, m.events_since(since)) for m in ms if m.events_since(since)]
    assert not moved, f"{why}: assignments moved {moved}\n{explain_members(ms)}\n{srv.log_tail()}"
    assert _generations(ms) == before, f"{why}: generations moved\n{explain_members(ms)}"


@pytest.mark.parametrize("kind", kind_params())
async def test_partitions_added_reach_every_consumer(kind, request, members, peers_dir, tmp_path):
    require_kind(request, kind)
    if kind == "java":
        # Since kafka-clients 4.4 replaced 3.9.1 here, the Java leader rejoins right after
        # groupcoord's kill -9 restart (a protocol_changed rebalance). Not yet compared with a
        # restarted Kafka broker: kept visible, not hidden.
        request.applymarker(pytest.mark.xfail(reason="kafka-clients 4.4 rejoins after its "
                                              "coordinator restarts", strict=False))
    srv = du.ServerProc.create(tmp_path, {SHARED: 4, OTHER: 2})
    try:
        srv.start()
        await srv.wait_loaded(SHARED)
        group = f"hash-{kind}"
        ms = [
            await members(kind, f"{kind}-{i}", bootstrap=srv.bootstrap, group=group, topic=SHARED,
                          session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                          metadata_max_age_ms=-1)
            for i in range(2)
        ]  # fmt: skip

        def split(n: int) -> bool:
            for m in ms:
                assert m.running(), f"{m.name} exited\n{m.log_tail()}"
            return partition_of(ms, n) and all(m.member_id for m in ms)

        await wait_until(lambda: split(4), 60, "2 members to split 4 partitions",
                         explain=lambda: explain_members(ms) + "\n" + srv.log_tail())  # fmt: skip
        await _no_rebalance_for(ms, 1.0, "settling", srv)  # the group is Stable

        # 1. An unrelated topic changes: nothing happens to this group.
        await asyncio.to_thread(_raise_partitions, kind, srv.bootstrap, OTHER, 4, peers_dir)
        await _no_rebalance_for(ms, 3 * HEARTBEAT_MS / 1000, "unrelated topic changed", srv)

        # 2. The shared topic grows to 8: every consumer gets its share of 8 in the very next
        # generation. Without the refresh signal a Java or aiokafka leader keeps assigning 4
        # until metadata.max.age (5 min: the 30 s wait fails), and a kafka-python leader assigns
        # 4 and then rebalances a second time (the generation check fails). No wall-clock bound:
        # the time taken is printed, for reading, not asserted.
        done_before = len(_completed_rebalances(srv, group))
        await asyncio.to_thread(_raise_partitions, kind, srv.bootstrap, SHARED, 8, peers_dir)
        answered = time.monotonic()
        await wait_until(lambda: split(8), 30, "2 members to split 8 partitions", interval=0.02,
                         explain=lambda: explain_members(ms) + "\n" + srv.log_tail())  # fmt: skip
        print(f"{kind}: 8 partitions assigned {time.monotonic() - answered:.2f}s after the change")
        since = _completed_rebalances(srv, group)[done_before:]
        assert [cause for _, cause in since] == ["partitions_added"], (
            f"{kind}: rebalances {since} for one topic change, expected exactly one\n"
            f"{explain_members(ms)}\n{srv.log_tail()}"
        )
        assert "metadata hash changed (topic shared: partitions_added)" in srv.log_path.read_text()

        # 3. A restart of groupcoord causes no rebalance.
        await _no_rebalance_for(ms, 1.0, "settling after the change", srv)
        srv.kill9()
        srv.start()
        await srv.wait_loaded(SHARED)
        await _no_rebalance_for(ms, 3 * HEARTBEAT_MS / 1000, "groupcoord restarted", srv)
        assert partition_of(ms, 8)
        assert "rebalancing" not in srv.log_path.read_text(), srv.log_tail()
    finally:
        srv.stop()
