"""Real clients with group.protocol=consumer (KIP-848, issue 23): Java kafka-clients 4.4 and
confluent-kafka (librdkafka 2.16) form groups through groupcoord's ConsumerGroupHeartbeat.

What each test shows, on a 12-partition topic:
- N members (one client kind, or both mixed) own every partition exactly once, and
  ConsumerGroupDescribe (API 69) agrees member for member; ListGroups lists the group with type
  "consumer";
- a member leaving and a member killed (the server's session timeout) have their partitions
  reassigned while the others keep theirs: no survivor is ever revoked a partition it owned
  (KIP-848's incremental reconciliation: nobody stops consuming);
- partitions added by CreatePartitions are assigned within about a heartbeat interval;
- a restart of groupcoord (SIGKILL, same data dir and port) resumes the group with the same
  group epoch, member epochs and assignment;
- an answer handing librdkafka partitions that it never got (it timed the answer out) reaches
  it again with its next heartbeat (issue 38).

The server runs with a 500 ms heartbeat interval and a 4 s session timeout, so every test is a
few seconds; every wait is a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.static.primitive import i32

from coordinator.tools.groups_wire import one_call
from protocol import apis
from tests.support import kafka
from tests.support import realclients as rc
from tests.support.realclients import (
    PARTITIONS,
    Member,
    explain_members,
    kind_params,
    partition_of,
    require_kind,
    wait_until,
)
from tests.support.sidecar_util import LostHandovers, kio

pytestmark = pytest.mark.clients

TOPIC = "orders"
CONSUMER_OPTIONS = {"consumer_heartbeat_interval_ms": 500, "consumer_session_timeout_ms": 4000}


def _start(server: Any) -> rc.Broker:
    return server(topics={TOPIC: PARTITIONS}, **CONSUMER_OPTIONS)


async def _member(
    members: Any, kind: str, name: str, broker: rc.Broker, group: str,
    instance_id: str | None = None,
) -> Member:
    return await members(
        kind,
        name,
        bootstrap=broker.bootstrap,
        group=group,
        topic=TOPIC,
        assignors=["uniform"],
        group_protocol="consumer",
        instance_id=instance_id,
    )


async def describe(broker: rc.Broker, group: str) -> Any:
    """ConsumerGroupDescribe (API 69) of one group, straight from the wire."""
    response = await one_call(
        broker.host,
        broker.port,
        apis.CONSUMER_GROUP_DESCRIBE,
        10,
        group_ids=(group,),
        include_authorized_operations=False,
    )
    (described,) = response.groups
    return described


def owned_by_member(described: Any) -> dict[str, frozenset[int]]:
    return {
        m.member_id: frozenset(p for tp in m.assignment.topic_partitions for p in tp.partitions)
        for m in described.members
    }


async def wait_split(
    broker: rc.Broker,
    group: str,
    ms: list[Member],
    partitions: int = PARTITIONS,
    timeout: float = 60,
) -> Any:
    """Until the members own every partition once and ConsumerGroupDescribe agrees (Stable, the
    same member ids, the same partitions). Returns the description."""
    seen: list[Any] = []

    async def agreed() -> Any:
        for m in ms:
            assert m.running(), f"{m.name} exited with {m.proc.returncode}\n{m.log_tail()}"
        if not (partition_of(ms, partitions) and all(m.member_id for m in ms)):
            return None
        described = await describe(broker, group)
        said = {m.member_id: m.owned for m in ms}
        seen[:] = [described.group_state, owned_by_member(described), said]
        ok = described.group_state == "Stable" and owned_by_member(described) == said
        return described if ok else None

    return await wait_until(
        agreed,
        timeout,
        f"{len(ms)} members to split {partitions} partitions, as ConsumerGroupDescribe says",
        interval=0.2,
        explain=lambda: f"described/said: {seen}\n" + explain_members(ms, broker),
    )


def revoked_since(m: Member, t: float) -> list[int]:
    return [p for e in m.events_since(t) if e["event"] == "revoked" for p in e["partitions"]]


@pytest.mark.parametrize(
    ("kinds"),
    [
        pytest.param(("confluent",), id="confluent-1"),
        pytest.param(("confluent",) * 3, id="confluent-3"),
        pytest.param(("java",), id="java-1", marks=pytest.mark.java),
        pytest.param(("java",) * 3, id="java-3", marks=pytest.mark.java),
        pytest.param(("java", "confluent", "confluent"), id="mixed", marks=pytest.mark.java),
        pytest.param(("java", "confluent") * 4, id="mixed-8", marks=pytest.mark.java),
    ],
)
async def test_members_form_a_group(request, server, members, kinds):
    for kind in set(kinds):
        require_kind(request, kind)
    broker = _start(server)
    group = f"kip848-{request.node.callspec.id}"
    ms = [
        await _member(members, kind, f"{kind}-{i}", broker, group) for i, kind in enumerate(kinds)
    ]
    described = await wait_split(broker, group, ms)
    assert described.assignor_name == "uniform"
    assert described.assignment_epoch == described.group_epoch
    assert {m.client_id for m in described.members} == {m.name for m in ms}
    sizes = sorted(len(m.owned or ()) for m in ms)
    assert sizes[-1] - sizes[0] <= 1, sizes  # uniform: balanced
    listed = await one_call(
        broker.host, broker.port, apis.LIST_GROUPS, 10, states_filter=(), types_filter=("consumer",)
    )
    assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups] == [
        (group, "consumer", "consumer", "Stable")
    ]
    classic = await one_call(
        broker.host, broker.port, apis.LIST_GROUPS, 10, states_filter=(), types_filter=("classic",)
    )
    assert [g.group_id for g in classic.groups] == []


@pytest.mark.parametrize("kind", kind_params(("confluent", "java")))
async def test_leave_and_kill_reassign_without_stopping_the_others(request, server, members, kind):
    require_kind(request, kind)
    broker = _start(server)
    group = f"kip848-churn-{kind}"
    ms = [await _member(members, kind, f"{kind}-{i}", broker, group) for i in range(3)]
    await wait_split(broker, group, ms)

    # A member leaves (epoch -1): its partitions go to the two others at once.
    leaving, rest = ms[0], ms[1:]
    before = {m.name: m.owned for m in rest}
    t = time.monotonic()
    await leaving.close()
    await wait_split(broker, group, rest, timeout=20)
    for m in rest:
        assert not revoked_since(m, t), f"{m.name} lost partitions while another left"
        assert before[m.name] is not None and before[m.name] <= (m.owned or frozenset())

    # A member is killed: the server fences it when its session times out (4 s here).
    killed, survivor = rest
    kept = survivor.owned
    t = time.monotonic()
    killed.kill()
    described = await wait_split(broker, group, [survivor], timeout=30)
    elapsed = time.monotonic() - t
    assert not revoked_since(survivor, t)
    assert kept is not None and kept <= (survivor.owned or frozenset())
    assert len(described.members) == 1
    assert elapsed >= 3.0, f"fenced after {elapsed:.1f} s, before the 4 s session timeout"


async def test_a_regex_subscription_is_resolved_by_the_server(request, server, members):
    """librdkafka sends a `^`-topic as ConsumerGroupHeartbeat's SubscribedTopicRegex (v1): the
    server resolves it against its topics (RE2 syntax) and assigns what matches."""
    require_kind(request, "confluent")
    broker = server(topics={TOPIC: PARTITIONS, "other": 3}, **CONSUMER_OPTIONS)
    group = "kip848-regex"
    ms = [await members("confluent", f"regex-{i}", bootstrap=broker.bootstrap, group=group,
                        topic="^ord.*", assignors=["uniform"], group_protocol="consumer")
          for i in range(2)]
    described = await wait_split(broker, group, ms)
    # librdkafka joins its patterns into one regex: "(^ord.*)".
    assert {m.subscribed_topic_regex for m in described.members} == {"(^ord.*)"}
    topics = {tp.topic_name for m in described.members for tp in m.assignment.topic_partitions}
    assert topics == {TOPIC}  # "other" does not match


@pytest.mark.parametrize("kind", kind_params(("confluent", "java")))
async def test_a_static_member_restarted_gets_its_partitions_back(request, server, members, kind):
    """KIP-848 static membership: a member with group.instance.id that closes leaves with epoch
    -2, its partitions held for it; restarted (a new member id, the same instance id) before its
    session runs out, it gets them back and nobody else is touched (no epoch bump)."""
    require_kind(request, kind)
    # The static member's partitions are held for it only until its session runs out: 4 s was
    # shorter than a JVM's start on a loaded machine (the Java case failed 2 runs in 6 there).
    options = dict(CONSUMER_OPTIONS, consumer_session_timeout_ms=15_000)
    broker = server(topics={TOPIC: PARTITIONS}, **options)
    group = f"kip848-static-{kind}"
    ms = [await _member(members, kind, f"{kind}-s{i}", broker, group, instance_id=f"s{i}")
          for i in range(3)]
    before = await wait_split(broker, group, ms)
    leaving, rest = ms[1], [ms[0], ms[2]]
    held = leaving.owned
    kept = {m.name: m.owned for m in rest}
    t = time.monotonic()
    await leaving.close()
    again = await _member(members, kind, f"{kind}-s1-again", broker, group, instance_id="s1")
    after = await wait_split(broker, group, [rest[0], again, rest[1]], timeout=20)
    assert again.member_id != leaving.member_id and again.owned == held
    for m in rest:
        assert not revoked_since(m, t) and m.owned == kept[m.name], m.name
    assert after.group_epoch == before.group_epoch, "a static rejoin must not rebalance"


@pytest.mark.parametrize("kind", kind_params(("confluent", "java")))
async def test_added_partitions_are_assigned(request, server, members, kind):
    require_kind(request, kind)
    broker = _start(server)
    group = f"kip848-grow-{kind}"
    ms = [await _member(members, kind, f"{kind}-{i}", broker, group) for i in range(2)]
    await wait_split(broker, group, ms)
    epoch = (await describe(broker, group)).group_epoch

    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    t = time.monotonic()
    futures = admin.create_partitions([NewPartitions(TOPIC, PARTITIONS + 4)])
    await asyncio.to_thread(futures[TOPIC].result, 10)
    # The server assigns them at the next heartbeat (500 ms); the clients then need the new
    # partitions' metadata (they refresh it on an unknown partition of a known topic id).
    described = await wait_split(broker, group, ms, partitions=PARTITIONS + 4, timeout=15)
    elapsed = time.monotonic() - t
    assert described.group_epoch == epoch + 1  # one bump: the topic's metadata hash changed
    print(f"{kind}: 4 new partitions owned {elapsed:.2f} s after CreatePartitions")


def _restart(broker: rc.Broker) -> None:
    """SIGKILL the server and start it again on the same port and data dir."""
    os.killpg(broker.proc.pid, signal.SIGKILL)
    broker.proc.wait(timeout=10)
    cmd = rc.groupcoord_command(
        broker.port, broker.data_dir, broker.topics, {"metrics_listen": "", **CONSUMER_OPTIONS}, []
    )
    with broker.log_path.open("ab") as log:
        broker.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=rc.REPO,
            start_new_session=True,
        )
    rc.wait_until_sync(
        lambda: not broker.alive() or rc.can_connect(broker.host, broker.port),
        20,
        "groupcoord to listen again",
    )
    assert broker.alive(), broker.log_tail()


async def test_restart_resumes_the_group_with_the_same_epochs(request, server, members):
    broker = _start(server)
    group = "kip848-restart"
    ms = [await _member(members, "confluent", f"confluent-{i}", broker, group) for i in range(2)]
    before = await wait_split(broker, group, ms)
    epochs = {m.member_id: m.member_epoch for m in before.members}
    t = time.monotonic()
    _restart(broker)

    async def resumed() -> Any:
        with contextlib.suppress(Exception):
            return await describe(broker, group)
        return None

    after = await wait_until(
        resumed, 20, "the restarted server to describe the group", explain=broker.log_tail
    )
    # Replayed from the log: the same epochs and assignment, before any member heartbeats.
    assert (after.group_epoch, after.assignment_epoch) == (
        before.group_epoch,
        before.assignment_epoch,
    )
    assert {m.member_id: m.member_epoch for m in after.members} == epochs
    assert owned_by_member(after) == owned_by_member(before)
    # The members carry on with it: heartbeats at the same epochs, nothing revoked or re-joined.
    again = await wait_split(broker, group, ms, timeout=20)
    assert again.group_epoch == before.group_epoch
    assert {m.member_id: m.member_epoch for m in again.members} == epochs
    for m in ms:
        assert not revoked_since(m, t), m.name


def _delete_offsets(bootstrap: str, group: str, parts: list[tuple[str, int]]) -> dict[Any, str]:
    """Kafka 4.4's own kafka-consumer-groups --delete-offsets (Admin.deleteConsumerGroupOffsets,
    OffsetDelete API 47; confluent-kafka's Python AdminClient has no such call): (topic,
    partition) -> "Successful" or the exception the tool printed for it; a group-level error is
    {"group": the exception}."""
    peers = Path(os.environ.get("GROUPCOORD_PEERS", str(rc.DEFAULT_PEERS))).resolve()
    topics = [arg for t, p in parts for arg in ("--topic", f"{t}:{p}")]
    out = kafka.run_tool(peers, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                         "--bootstrap-server", bootstrap, "--delete-offsets", "--group", group,
                         *topics)  # fmt: skip
    rows: dict[Any, str] = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 3 and (cols[0], cols[1]) in {(t, str(p)) for t, p in parts}:
            status = " ".join(cols[2:])
            found = re.search(r"(\w+Exception)", status)
            rows[(cols[0], int(cols[1]))] = found.group(1) if found else status
    if not rows:
        found = re.search(r"(\w+Exception)", out)
        rows["group"] = found.group(1) if found else out
    return rows


def _commit_offsets(bootstrap: str, group: str, parts: list[tuple[str, int]], offset: int) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, offset) for t, p in parts])
    admin.alter_consumer_group_offsets([request], request_timeout=10)[group].result(10)


def _committed(bootstrap: str, group: str, parts: list[tuple[str, int]]) -> dict[Any, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in parts])
    done = admin.list_consumer_group_offsets([request], request_timeout=10)[group].result(10)
    return {(tp.topic, tp.partition): tp.offset for tp in done.topic_partitions}


async def test_offset_delete_on_a_consumer_group(request, server, members):
    """OffsetDelete (API 47) on a KIP-848 group, as Kafka answers it: per partition,
    GROUP_SUBSCRIBED_TO_TOPIC for a topic a member subscribes to, NONE (deleted) otherwise;
    once the group is empty nothing is subscribed and every offset can go. An unknown group is
    GROUP_ID_NOT_FOUND."""
    require_kind(request, "confluent")
    broker = server(topics={TOPIC: PARTITIONS, "other": 2}, **CONSUMER_OPTIONS)
    group = "kip848-offset-delete"
    both = [(TOPIC, 0), ("other", 0)]
    await asyncio.to_thread(_commit_offsets, broker.bootstrap, group, both, 7)
    m = await _member(members, "confluent", "confluent-od", broker, group)
    await wait_split(broker, group, [m])
    live = await asyncio.to_thread(_delete_offsets, broker.bootstrap, group, both)
    assert live == {(TOPIC, 0): "GroupSubscribedToTopicException", ("other", 0): "Successful"}
    left = await asyncio.to_thread(_committed, broker.bootstrap, group, both)
    assert left[("other", 0)] < 0 and left[(TOPIC, 0)] >= 0  # only "other" was deleted

    await m.close()
    empty = await wait_until(_empty(broker, group), 20, "the group to be empty")
    assert empty.group_state == "Empty"
    gone = await asyncio.to_thread(_delete_offsets, broker.bootstrap, group, both)
    assert gone == {(TOPIC, 0): "Successful", ("other", 0): "Successful"}
    left = await asyncio.to_thread(_committed, broker.bootstrap, group, both)
    assert all(offset < 0 for offset in left.values()), left
    unknown = await asyncio.to_thread(_delete_offsets, broker.bootstrap, "kip848-none", both)
    assert set(unknown.values()) == {"GroupIdNotFoundException"}


def _empty(broker: rc.Broker, group: str) -> Any:
    async def check() -> Any:
        described = await describe(broker, group)
        return described if described.group_state == "Empty" else None

    return check


class _Raw:
    """A consumer-protocol member the test drives itself, one ConsumerGroupHeartbeat at a time
    (a full request each time, so every answer carries its assignment): when it releases
    partitions is the test's choice."""

    def __init__(self, broker: rc.Broker, group: str, member_id: str) -> None:
        self.broker, self.group, self.member_id = broker, group, member_id
        self.epoch = 0
        self.given: frozenset[int] = frozenset()
        self.topic_id: Any = None
        self._one_at_a_time = asyncio.Lock()  # the test's steps and the keep-alive task

    async def beat(self, owned: frozenset[int] | None) -> None:
        """One heartbeat reporting `owned` (None: unchanged, so nothing revoked yet)."""
        async with self._one_at_a_time:
            await self._beat(owned)

    async def _beat(self, owned: frozenset[int] | None) -> None:
        tps = None if owned is None else (
            (kio(apis.CONSUMER_GROUP_HEARTBEAT, 1, "TopicPartitions", topic_id=self.topic_id,
                 partitions=tuple(i32(p) for p in sorted(owned))),) if owned else ())
        r = await one_call(
            self.broker.host, self.broker.port, apis.CONSUMER_GROUP_HEARTBEAT, 10,
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
            instance_id=None, rack_id=None, rebalance_timeout=timedelta(seconds=60),
            subscribed_topic_names=(TOPIC,), subscribed_topic_regex=None,
            server_assignor="uniform", topic_partitions=tps,
        )  # fmt: skip
        assert r.error_code == 0, r
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.given = frozenset(p for tp in r.assignment.topic_partitions
                                   for p in tp.partitions)
            self.topic_id = next((tp.topic_id for tp in r.assignment.topic_partitions),
                                 self.topic_id)


async def test_a_lost_answer_that_handed_over_partitions_reaches_librdkafka_again(
    server: Any, members: Any
) -> None:
    """Issue 38: librdkafka times a ConsumerGroupHeartbeat out after one heartbeat interval and
    drops the late answer; a member that has partitions then heartbeats on without a full
    request. Two members the test drives hold six partitions each; a librdkafka member joins
    (four each) through a relay (on another loopback address, which groupcoord advertises).
    The first releases two: the newcomer gets them. The second releases two: the relay loses
    the answer handing them over, at the same member epoch. By Kafka's rule that answer was
    never repeated: the newcomer kept two while the group counted it reconciled to four
    (Stable), past any deadline. groupcoord repeats it until the member reports owning them
    (core.consumer.member_update.AssignmentAcks)."""
    group = "lost-answer"
    broker = server(topics={TOPIC: PARTITIONS}, advertised_host="127.0.0.2", **CONSUMER_OPTIONS)
    holders = [_Raw(broker, group, "holder-1"), _Raw(broker, group, "holder-2")]

    async def six_each() -> bool:  # join, revoke, take (targets are computed paced)
        for h in holders:
            await h.beat(h.given)
        return [len(h.given) for h in holders] == [6, 6]

    await wait_until(six_each, 20, "the holders own six each", interval=0.2)
    relay = LostHandovers(broker.port, broker.port, host="127.0.0.2")
    await relay.start()
    released = [False, False]

    async def keep_alive() -> None:  # the holders' session (4 s); a holder not yet told to
        while True:  # release reports nothing new, so it keeps its six
            for h, done in zip(holders, released, strict=True):
                await h.beat(h.given if done else None)
            await asyncio.sleep(1)

    alive = asyncio.create_task(keep_alive())
    try:
        newcomer = await members("confluent", "newcomer", bootstrap=f"127.0.0.2:{broker.port}",
                                 group=group, topic=TOPIC, assignors=["uniform"],
                                 group_protocol="consumer")  # fmt: skip
        await wait_until(lambda: newcomer.member_id is not None, 30, "the newcomer joined")
        for i, h in enumerate(holders):

            async def told_to_keep_four(h: _Raw = h) -> bool:
                await h.beat(None)
                return len(h.given) == 4

            await wait_until(told_to_keep_four, 20, f"{h.member_id} told to keep four",
                             interval=0.2)
            released[i] = True
            await h.beat(h.given)  # released two
            await wait_until(lambda i=i: len(newcomer.owned or ()) == 2 * (i + 1), 20,
                             f"the newcomer owns {2 * (i + 1)}", interval=0.1)
        assert relay.lost == 1, "the handover's answer was not lost: this tested nothing"
    finally:
        alive.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await alive
        await relay.stop()
