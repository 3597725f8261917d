"""KIP-932's admin side at the wire: DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91),
DeleteShareGroupOffsets (92), and the classic admin APIs on a share group id (ListGroups,
DescribeGroups, DeleteGroups, OffsetCommit, OffsetDelete, JoinGroup), kio-encoded.

The same steps run against Apache Kafka 4.4 (the reference) and groupcoord's standalone server, and
their answers are compared field by field. Intended differences, left out of the comparison:
topic ids (each cluster has its own); member epochs (Kafka assigns a share member nothing until
its share coordinator initialized the partitions, so its epochs run ahead); the Lag of
DescribeShareGroupOffsets v1 (Kafka's is the high watermark minus the start offset, groupcoord's
core knows no high watermark and answers -1)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.support.kafka import unique
from tests.support.kafka_tools import SHARE_GROUPS, KafkaTools, tool_classes, tools
from tests.support.realclients import wait_until, wait_until_sync
from tests.support.sidecar_util import RawClient, kio

__all__ = ["tool_classes", "tools"]  # the fixtures

E = ErrorCode


def heartbeat(group: str, member: str, epoch: int, topics: tuple[str, ...] | None = None) -> Any:
    return kio(76, 1, "ShareGroupHeartbeatRequest", group_id=group, member_id=member,
               member_epoch=epoch, rack_id=None, subscribed_topic_names=topics)


def describe_offsets(group: str, topics: dict[str, tuple[int, ...]] | None = None,
                     version: int = 1) -> Any:
    named = None if topics is None else tuple(
        kio(90, version, "DescribeShareGroupOffsetsRequestTopic", topic_name=t, partitions=ps)
        for t, ps in topics.items())
    return kio(90, version, "DescribeShareGroupOffsetsRequest", groups=(
        kio(90, version, "DescribeShareGroupOffsetsRequestGroup", group_id=group, topics=named),))


def alter_offsets(group: str, topics: dict[str, dict[int, int]]) -> Any:
    return kio(91, 0, "AlterShareGroupOffsetsRequest", group_id=group, topics=tuple(
        kio(91, 0, "AlterShareGroupOffsetsRequestTopic", topic_name=t, partitions=tuple(
            kio(91, 0, "AlterShareGroupOffsetsRequestPartition", partition_index=p,
                start_offset=o) for p, o in ps.items()))
        for t, ps in topics.items()))


def delete_offsets(group: str, *topics: str) -> Any:
    return kio(92, 0, "DeleteShareGroupOffsetsRequest", group_id=group, topics=tuple(
        kio(92, 0, "DeleteShareGroupOffsetsRequestTopic", topic_name=t) for t in topics))


def list_groups(types: tuple[str, ...] = (), states: tuple[str, ...] = ()) -> Any:
    return kio(16, 5, "ListGroupsRequest", states_filter=states, types_filter=types)


def described(response: Any, with_lag: bool = False) -> list[Any]:
    """A DescribeShareGroupOffsets answer without its topic ids (and lag unless asked)."""
    return [(g.group_id, g.error_code, g.error_message, [
        (t.topic_name, t.topic_id is not None, [
            (p.partition_index, p.start_offset, p.leader_epoch, p.error_code, p.error_message,
             *((p.lag,) if with_lag else ())) for p in t.partitions])
        for t in g.topics]) for g in response.groups]


def altered(response: Any) -> Any:
    return (response.error_code, response.error_message, [
        (t.topic_name, t.topic_id is not None,
         [(p.partition_index, p.error_code, p.error_message) for p in t.partitions])
        for t in response.responses])


def deleted(response: Any) -> Any:
    return (response.error_code, response.error_message, [
        (t.topic_name, t.topic_id is not None, t.error_code, t.error_message)
        for t in response.responses])


async def scenario(port: int, topic: str, names: Callable[[str], str]) -> list[Any]:
    """The steps, each answer normalized: what both servers must agree on."""
    g, g2, cg, nope = names("g"), names("g2"), names("cg"), names("nope")
    client = await RawClient.connect(port)
    out: list[Any] = []
    member = str(uuid.uuid4())
    epoch = 0
    assigned: list[int] = []

    async def joined() -> bool:  # until the member holds both partitions (Kafka: initialized)
        nonlocal epoch, assigned
        r = await client.call(heartbeat(g, member, epoch, (topic,) if epoch == 0 else None))
        if r.error_code in (E.not_coordinator, E.coordinator_load_in_progress):
            # A new Kafka cluster makes its group coordinator on the first FindCoordinator.
            await client.call(kio(10, 4, "FindCoordinatorRequest", key_type=0,
                                  coordinator_keys=(g,)))
            return False
        assert r.error_code == E.none, r
        epoch = r.member_epoch
        if r.assignment is not None:
            assigned = sorted(p for tp in r.assignment.topic_partitions for p in tp.partitions)
        return assigned == [0, 1]

    await wait_until(joined, 60, "the share member holding both partitions", interval=0.2)
    out.append(("describe all, joined", described(await client.call(describe_offsets(g)))))
    out.append(("describe named, joined", described(await client.call(
        describe_offsets(g, {topic: (1, 0)}, version=0)))))
    out.append(("alter, joined", altered(await client.call(alter_offsets(g, {topic: {0: 2}})))))
    out.append(("delete, joined", deleted(await client.call(delete_offsets(g, topic)))))
    out.append(("DeleteGroups, joined", [(r.group_id, r.error_code) for r in (await client.call(
        kio(42, 2, "DeleteGroupsRequest", groups_names=(g,)))).results]))
    listed = await client.call(list_groups(("share",)))
    out.append(("ListGroups share", [(x.protocol_type, x.group_state, x.group_type)
                                     for x in listed.groups if x.group_id == g]))
    listed = await client.call(list_groups(("consumer", "classic")))
    out.append(("ListGroups others", [x for x in listed.groups if x.group_id == g]))
    for v in (5, 6):
        r = await client.call(kio(15, v, "DescribeGroupsRequest", groups=(g,),
                                  include_authorized_operations=False))
        out.append((f"DescribeGroups v{v}", r.groups))
    commit = kio(8, 9, "OffsetCommitRequest", group_id=g, generation_id_or_member_epoch=-1,
                 member_id="", group_instance_id=None, topics=(
                     kio(8, 9, "OffsetCommitRequestTopic", name=topic, partitions=(
                         kio(8, 9, "OffsetCommitRequestPartition", partition_index=0,
                             committed_offset=1, committed_leader_epoch=-1,
                             committed_metadata=""),)),))
    out.append(("OffsetCommit", (await client.call(commit)).topics))
    fetch = kio(9, 9, "OffsetFetchRequest", groups=(kio(
        9, 9, "OffsetFetchRequestGroup", group_id=g, member_id=None, member_epoch=-1,
        topics=None),), require_stable=False)
    out.append(("OffsetFetch", (await client.call(fetch)).groups))
    offset_delete = kio(47, 0, "OffsetDeleteRequest", group_id=g, topics=(kio(
        47, 0, "OffsetDeleteRequestTopic", name=topic, partitions=(
            kio(47, 0, "OffsetDeleteRequestPartition", partition_index=0),)),))
    out.append(("OffsetDelete", (await client.call(offset_delete)).error_code))
    join = kio(11, 5, "JoinGroupRequest", group_id=g, session_timeout=timedelta(seconds=10),
               rebalance_timeout=timedelta(seconds=10), member_id="", group_instance_id=None,
               protocol_type="consumer",
               protocols=(kio(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b""),))
    r = await client.call(join)
    out.append(("JoinGroup", (r.error_code, r.generation_id, r.member_id)))

    left = await client.call(heartbeat(g, member, -1))
    out.append(("leave", (left.error_code, left.member_epoch)))
    # Kafka 4.4 takes seconds over an unknown topic or partition (its share coordinator times out),
    # longer than the member's session: asked once the group is empty.
    out.append(("describe named, unknown topic", described(await client.call(
        describe_offsets(g, {topic: (0, 5), nope: (0,)}, version=0), timeout=60))))
    out.append(("alter, empty", altered(await client.call(
        alter_offsets(g, {topic: {7: 3, 0: 2}, nope: {0: 2}})))))
    out.append(("describe named, altered", described(await client.call(
        describe_offsets(g, {topic: (0, 1)})))))
    out.append(("alter again", altered(await client.call(
        alter_offsets(g, {topic: {1: -5, 0: 100}})))))
    out.append(("describe named, altered again", described(await client.call(
        describe_offsets(g, {topic: (0, 1)})))))
    out.append(("delete, empty", deleted(await client.call(delete_offsets(g, topic, nope)))))
    out.append(("describe named, deleted", described(await client.call(
        describe_offsets(g, {topic: (0,)})))))
    out.append(("describe all, deleted", described(await client.call(describe_offsets(g)))))

    out.append(("alter unknown group", altered(await client.call(
        alter_offsets(g2, {topic: {0: 3}})))))
    listed = await client.call(list_groups(("share",), ("empty",)))
    out.append(("ListGroups Empty share", sorted(
        (x.group_id == g2, x.group_state) for x in listed.groups if x.group_id in (g, g2))))
    out.append(("delete unknown group", deleted(await client.call(delete_offsets(nope, topic)))))
    out.append(("DeleteGroups, empty", [(r.group_id == g, r.error_code) for r in (
        await client.call(kio(42, 2, "DeleteGroupsRequest", groups_names=(g,)))).results]))
    listed = await client.call(list_groups(("share",)))
    out.append(("ListGroups after delete", [x.group_id == g2 for x in listed.groups
                                            if x.group_id in (g, g2)]))
    out.append(("describe all, group deleted", described(await client.call(describe_offsets(g)))))

    consumer = kio(68, 0, "ConsumerGroupHeartbeatRequest", group_id=cg,
                   member_id=str(uuid.uuid4()), member_epoch=0, instance_id=None, rack_id=None,
                   rebalance_timeout=timedelta(seconds=30), subscribed_topic_names=(topic,),
                   server_assignor=None, topic_partitions=())
    out.append(("consumer group", (await client.call(consumer)).error_code))
    out.append(("describe consumer group", described(await client.call(describe_offsets(cg)))))
    out.append(("alter consumer group", altered(await client.call(
        alter_offsets(cg, {topic: {0: 3}})))))
    out.append(("delete consumer group", deleted(await client.call(delete_offsets(cg, topic)))))
    client.close()
    return [_scrub(step, names) for step in out]


def _scrub(step: Any, names: Callable[[str], str]) -> Any:
    """Group ids and their messages with the run's unique names taken out."""
    text = repr(step)
    for role in ("g2", "cg", "nope", "g"):
        text = text.replace(names(role), f"<{role}>")
    return text


@pytest.mark.timeout(240)
async def test_share_admin_answers_as_kafka(kafka: Any, server: Callable[..., Any]) -> None:
    topic = unique("share-admin")
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    wait_until_sync(lambda: topic in admin.list_topics(timeout=10).topics, 30, "the topic")
    prefix = unique("sa")

    def kafka_names(role: str) -> str:
        return f"{prefix}-{role}"

    expected = await scenario(int(kafka.bootstrap.rsplit(":", 1)[1]), topic, kafka_names)

    broker = server(topics={topic: 2})
    got = await scenario(broker.port, topic, lambda role: f"local-{role}")
    assert len(got) == len(expected)
    differ = [f"groupcoord: {have}\nKafka 4.4:  {want}"
              for have, want in zip(got, expected, strict=True) if have != want]
    assert not differ, "\n".join(differ)


async def test_share_offsets_survive_a_restart(server: Callable[..., Any]) -> None:
    """Alter and Delete are records: a kill -9 keeps exactly what was answered."""
    broker = server(topics={"t": 3})
    client = await RawClient.connect(broker.port)
    assert (await client.call(alter_offsets("g", {"t": {0: 5, 2: 9}}))).error_code == E.none
    assert (await client.call(delete_offsets("g", "t"))).error_code == E.none
    assert (await client.call(alter_offsets("g", {"t": {1: 7}}))).error_code == E.none
    before = described(await client.call(describe_offsets("g")), with_lag=True)
    assert before == [("g", E.none, None, [("t", True, [(1, 7, 0, E.none, None, -1)])])]
    client.close()
    broker.stop()  # SIGKILL
    restarted = server(topics={"t": 3}, extra=["--data-dir", str(broker.data_dir)])
    client = await RawClient.connect(restarted.port)

    async def loaded() -> list[Any] | None:  # it listens before its log is replayed
        got = described(await client.call(describe_offsets("g")), with_lag=True)
        return None if any(g[1] == E.coordinator_load_in_progress for g in got) else got

    after = await wait_until(loaded, 30, "the restarted server to load its log")
    assert after == before
    listed = await client.call(list_groups(("share",)))
    assert [(x.group_id, x.group_state) for x in listed.groups] == [("g", "Empty")]
    client.close()


async def test_kafka_share_groups_tool(server: Callable[..., Any], tools: KafkaTools) -> None:
    """Kafka's own kafka-share-groups.sh (ShareGroupCommand, kafka-tools 4.4) lists, describes,
    resets and deletes a share group on groupcoord."""
    broker = server(topics={"t": 3})
    client = await RawClient.connect(broker.port)
    member = str(uuid.uuid4())
    assert (await client.call(heartbeat("sg", member, 0, ("t",)))).error_code == E.none
    bootstrap = f"127.0.0.1:{broker.port}"

    async def tool(*args: str) -> str:
        result = await tools.arun(SHARE_GROUPS, "--bootstrap-server", bootstrap, *args)
        return f"{result.returncode}|{result.stdout.strip()}|{result.stderr.strip()}"

    assert await tool("--list") == "0|sg|"
    members = await tool("--describe", "--group", "sg", "--members")
    assert member in members and "t:0,1,2" in members, members
    state = await tool("--describe", "--group", "sg", "--state")
    assert " Stable " in state and state.rstrip("|").endswith("1"), state
    refused = await tool("--reset-offsets", "--group", "sg", "--topic", "t", "--to-earliest",
                         "--execute")
    assert "is not empty" in refused or "not empty" in refused.lower(), refused
    assert (await client.call(heartbeat("sg", member, -1))).error_code == E.none

    assert (await tool("--reset-offsets", "--group", "sg", "--topic", "t", "--to-earliest",
                       "--execute")).startswith("0|")
    offsets = (await tool("--describe", "--group", "sg", "--offsets")).split("|")[1]
    assert [line.split()[:4] for line in offsets.splitlines()[1:]] == [
        ["sg", "t", str(p), "0"] for p in range(3)]
    deleted = await tool("--delete-offsets", "--group", "sg", "--topic", "t")
    assert "Successful" in deleted, deleted
    offsets = await tool("--describe", "--group", "sg", "--offsets")
    assert "sg" in offsets and " t " not in offsets, offsets
    assert "was successful" in await tool("--delete", "--group", "sg")
    assert await tool("--list") == "0||"
    client.close()
