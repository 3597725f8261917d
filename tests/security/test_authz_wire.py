"""Issue 22 acceptance: Kafka's authorization matrix (coordinator/serve/authz.py's docstring) over
the wire, table-driven. For every API and resource a principal the ACLs allow and one they do not
send the same request on a SASL_PLAINTEXT connection (`--authorizer acl`, super user admin); each
gets the answer and error code Kafka gives. Also: a principal without GROUP DELETE cannot delete a
group, ListGroups hides the groups a principal may not describe, OffsetFetch of "all topics" hides
the topics it may not describe, and the ACL APIs without CLUSTER ALTER/DESCRIBE are
CLUSTER_AUTHORIZATION_FAILED. TxnOffsetCommit, which only a sidecar offers (issue 29), is judged
through a secured sidecar in front of tansu, with ACLs of its own (TXN_ACLS).

The ACLs (created by the admin with CreateAcls before the tests):
  alice  GROUP team-a* (prefixed) READ, DELETE; DENY READ on GROUP team-a-denied;
         TOPIC t READ, WRITE; TOPIC new-* (prefixed) CREATE, ALTER, DELETE
  bob    GROUP team-b READ
  carol  GROUP team-a READ (no DELETE); CLUSTER DESCRIBE
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.security import secure_util as su
from tests.support import realclients as rc
from tests.support.sidecar_util import Stack, commit_request, kio, produce_request, stack

pytestmark = pytest.mark.clients
__all__ = ["stack"]

NONE, UNKNOWN_MEMBER_ID, MEMBER_ID_REQUIRED = 0, 25, 79
COORDINATOR_LOAD_IN_PROGRESS = 14
TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
SECRET = "secret"  # a topic only the admin may touch
TOPICS = {su.TOPIC: su.PARTITIONS, SECRET: 2}
# Kafka's wire codes (org.apache.kafka.common.acl / resource)
TOPIC_T, GROUP_T, CLUSTER_T = 2, 3, 4
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
DENY, ALLOW = 2, 3
ACLS = [
    ("User:alice", GROUP_T, "team-a", PREFIXED, READ, ALLOW),
    ("User:alice", GROUP_T, "team-a", PREFIXED, DELETE, ALLOW),
    ("User:alice", GROUP_T, "team-a-denied", LITERAL, READ, DENY),
    ("User:alice", TOPIC_T, su.TOPIC, LITERAL, READ, ALLOW),
    ("User:alice", TOPIC_T, su.TOPIC, LITERAL, WRITE, ALLOW),
    ("User:alice", TOPIC_T, "new-", PREFIXED, CREATE, ALLOW),
    ("User:alice", TOPIC_T, "new-", PREFIXED, ALTER, ALLOW),
    ("User:alice", TOPIC_T, "new-", PREFIXED, DELETE, ALLOW),
    ("User:bob", GROUP_T, "team-b", LITERAL, READ, ALLOW),
    ("User:carol", GROUP_T, "team-a", LITERAL, READ, ALLOW),
    ("User:carol", CLUSTER_T, "kafka-cluster", LITERAL, DESCRIBE, ALLOW),
]
# Groups with committed offsets (by the admin) before the tests.
GROUPS = ("team-a", "team-a-x", "team-a-denied", "team-a-del", "team-b", "team-c")


def acl_creation(principal: str, rtype: int, name: str, pattern: int, op: int,
                 permission: int) -> Any:
    return kio(30, 3, "AclCreation", resource_type=rtype, resource_name=name,
               resource_pattern_type=pattern, principal=principal, host="*", operation=op,
               permission_type=permission)


async def create_all(admin: Any, acls: list[tuple[Any, ...]]) -> None:
    """CreateAcls of `acls`, asked again while the server still loads its state (a sidecar
    answers COORDINATOR_LOAD_IN_PROGRESS until then, which clients retry): every one created."""
    request = kio(30, 3, "CreateAclsRequest", creations=tuple(acl_creation(*a) for a in acls))

    async def answered() -> Any:
        created = await admin.call(request)
        loading = {r.error_code for r in created.results} == {COORDINATOR_LOAD_IN_PROGRESS}
        return None if loading else created

    created = await rc.wait_until(answered, 30, "CreateAcls after the state loaded", 0.1)
    assert [r.error_code for r in created.results] == [NONE] * len(acls), created


async def prepare(port: int) -> None:
    admin = await su.login(port, "admin")
    try:
        await create_all(admin, ACLS)
        for group in GROUPS:
            for topic in (su.TOPIC, SECRET):
                answer = await admin.call(commit_request(group, topic, {0: 5, 1: 6}))
                assert {p.error_code for t in answer.topics for p in t.partitions} == {NONE}
        for topic in ("new-p", "new-d"):
            made = await admin.call(create_topics(topic))
            assert made.topics[0].error_code == NONE, made
    finally:
        admin.close()


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory, peers_dir: Path,
               users_file: Path) -> Iterator[rc.Broker]:
    tmp = tmp_path_factory.mktemp("authz")
    args = su.security_args("SASL_PLAINTEXT", None, users_file, authorizer=True,
                            extra=("--topic", f"{SECRET}:2"))
    broker = su.start(tmp, peers_dir, args)
    try:
        asyncio.run(prepare(broker.port))
        yield broker
    finally:
        broker.stop()


async def ask(broker: rc.Broker, principal: str, request: Any) -> Any:
    client = await su.login(broker.port, principal)
    try:
        return await client.call(request)
    finally:
        client.close()


# --------------------------------------------------------------------------- request builders

SECONDS = datetime.timedelta(seconds=10)


def join(group: str) -> Any:
    return kio(11, 5, "JoinGroupRequest", group_id=group, session_timeout=SECONDS,
               rebalance_timeout=SECONDS, member_id="", group_instance_id=None,
               protocol_type="consumer",
               protocols=(kio(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b""),))


def sync(group: str) -> Any:
    return kio(14, 3, "SyncGroupRequest", group_id=group, generation_id=1, member_id="nobody",
               group_instance_id=None, assignments=())


def heartbeat(group: str) -> Any:
    return kio(12, 3, "HeartbeatRequest", group_id=group, generation_id=1, member_id="nobody",
               group_instance_id=None)


def leave(group: str) -> Any:
    return kio(13, 3, "LeaveGroupRequest", group_id=group, members=(
        kio(13, 3, "MemberIdentity", member_id="nobody", group_instance_id=None),))


def offset_fetch(group: str, topics: tuple[str, ...] | None) -> Any:
    return kio(9, 7, "OffsetFetchRequest", group_id=group, require_stable=False,
               topics=None if topics is None else tuple(
                   kio(9, 7, "OffsetFetchRequestTopic", name=t, partition_indexes=(0, 1))
                   for t in topics))


def offset_fetch_groups(*groups: str) -> Any:
    return kio(9, 8, "OffsetFetchRequest", require_stable=False, groups=tuple(
        kio(9, 8, "OffsetFetchRequestGroup", group_id=g, topics=None) for g in groups))


def offset_delete(group: str, *topics: str) -> Any:
    return kio(47, 0, "OffsetDeleteRequest", group_id=group, topics=tuple(
        kio(47, 0, "OffsetDeleteRequestTopic", name=t,
            partitions=(kio(47, 0, "OffsetDeleteRequestPartition", partition_index=1),))
        for t in topics))


def describe_groups(*groups: str) -> Any:
    return kio(15, 5, "DescribeGroupsRequest", groups=groups, include_authorized_operations=False)


def delete_groups(*groups: str) -> Any:
    return kio(42, 2, "DeleteGroupsRequest", groups_names=groups)


def list_groups() -> Any:
    return kio(16, 4, "ListGroupsRequest", states_filter=())


def find_coordinator(key: str, key_type: int = 0) -> Any:
    return kio(10, 3, "FindCoordinatorRequest", key=key, key_type=key_type)


def find_coordinators(*keys: str) -> Any:
    return kio(10, 4, "FindCoordinatorRequest", key_type=0, coordinator_keys=keys)


def metadata(*topics: str) -> Any:
    return kio(3, 12, "MetadataRequest", allow_auto_topic_creation=False,
               include_topic_authorized_operations=False,
               topics=tuple(kio(3, 12, "MetadataRequestTopic", topic_id=None, name=t)
                            for t in topics) if topics else None)


def list_offsets(topic: str) -> Any:
    return kio(2, 6, "ListOffsetsRequest", replica_id=-1, isolation_level=0, topics=(
        kio(2, 6, "ListOffsetsTopic", name=topic, partitions=(
            kio(2, 6, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1,
                timestamp=-1),)),))


def fetch(topic: str) -> Any:
    return kio(1, 12, "FetchRequest", cluster_id=None, replica_id=-1,
               max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, max_bytes=1 << 20,
               isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
               rack_id="", topics=(kio(1, 12, "FetchTopic", topic=topic, partitions=(
                   kio(1, 12, "FetchPartition", partition=0, current_leader_epoch=-1,
                       fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                       partition_max_bytes=1 << 20),)),))


def create_topics(name: str) -> Any:
    return kio(19, 5, "CreateTopicsRequest", timeout=SECONDS, validate_only=False, topics=(
        kio(19, 5, "CreatableTopic", name=name, num_partitions=2, replication_factor=1,
            assignments=(), configs=()),))


def create_partitions(name: str, count: int) -> Any:
    return kio(37, 2, "CreatePartitionsRequest", timeout=SECONDS, validate_only=False, topics=(
        kio(37, 2, "CreatePartitionsTopic", name=name, count=count, assignments=None),))


def delete_topics(name: str) -> Any:
    return kio(20, 4, "DeleteTopicsRequest", topic_names=(name,), timeout=SECONDS)


def create_acls() -> Any:
    """An ACL for a principal no test logs in as (the admin's creation changes nothing else)."""
    return kio(30, 3, "CreateAclsRequest", creations=(
        acl_creation("User:dave", GROUP_T, "team-z", LITERAL, READ, ALLOW),))


def describe_acls() -> Any:
    return kio(29, 3, "DescribeAclsRequest", resource_type_filter=1, resource_name_filter=None,
               pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
               permission_type=1)


def delete_acls() -> Any:
    return kio(31, 3, "DeleteAclsRequest", filters=(
        kio(31, 3, "DeleteAclsFilter", resource_type_filter=1, resource_name_filter=None,
            pattern_type_filter=1, principal_filter="User:dave", host_filter=None, operation=1,
            permission_type=1),))


def describe_scram() -> Any:
    return kio(50, 0, "DescribeUserScramCredentialsRequest", users=None)


def alter_scram() -> Any:
    return kio(51, 0, "AlterUserScramCredentialsRequest", upsertions=(), deletions=(
        kio(51, 0, "ScramCredentialDeletion", name="nobody", mechanism=2),))


# --------------------------------------------------------------------------- answer extractors


def top(r: Any) -> int:
    return int(r.error_code)


def per_topic(topics_field: str = "topics", name: str = "name",
              partitions: str = "partitions") -> Callable[[Any], dict[str, set[int]]]:
    def extract(r: Any) -> dict[str, set[int]]:
        return {getattr(t, name): {int(p.error_code) for p in getattr(t, partitions)}
                for t in getattr(r, topics_field)}
    return extract


def per_group(r: Any) -> dict[str, int]:
    return {g.group_id: int(g.error_code) for g in r.groups}


def fetched(r: Any) -> tuple[int, dict[str, set[int]]]:
    return int(r.error_code), per_topic()(r)


def results(field: str, key: str = "name") -> Callable[[Any], dict[str, int]]:
    return lambda r: {getattr(x, key): int(x.error_code) for x in getattr(r, field)}


@dataclass(frozen=True)
class Row:
    what: str
    request: Callable[[], Any]
    extract: Callable[[Any], Any]
    allowed: str
    allowed_answer: Any
    denied: str
    denied_answer: Any


G = "team-a"
ROWS = [
    Row("JoinGroup: GROUP READ", lambda: join("team-a-join"), top,
        "alice", MEMBER_ID_REQUIRED, "bob", GROUP_DENIED),
    Row("JoinGroup: a DENY beats the prefixed ALLOW", lambda: join("team-a-denied"), top,
        "admin", MEMBER_ID_REQUIRED, "alice", GROUP_DENIED),
    Row("SyncGroup: GROUP READ", lambda: sync(G), top, "alice", UNKNOWN_MEMBER_ID, "bob",
        GROUP_DENIED),
    Row("Heartbeat: GROUP READ", lambda: heartbeat(G), top, "alice", UNKNOWN_MEMBER_ID, "bob",
        GROUP_DENIED),
    Row("LeaveGroup: GROUP READ", lambda: leave(G), top, "carol", NONE, "bob", GROUP_DENIED),
    Row("OffsetCommit: GROUP READ", lambda: commit_request(G, su.TOPIC, {0: 9}),
        per_topic(), "alice", {su.TOPIC: {NONE}}, "bob", {su.TOPIC: {GROUP_DENIED}}),
    Row("OffsetCommit: TOPIC READ per topic",
        lambda: commit_request("team-a-x", su.TOPIC, {0: 9}), per_topic(),
        "alice", {su.TOPIC: {NONE}}, "carol", {su.TOPIC: {GROUP_DENIED}}),
    Row("OffsetFetch: GROUP DESCRIBE, then TOPIC DESCRIBE per named topic",
        lambda: offset_fetch(G, (su.TOPIC, SECRET)), fetched,
        "alice", (NONE, {su.TOPIC: {NONE}, SECRET: {TOPIC_DENIED}}),
        "bob", (GROUP_DENIED, {})),
    Row("OffsetFetch v8: each group on its own", lambda: offset_fetch_groups(G, "team-b"),
        per_group, "bob", {G: GROUP_DENIED, "team-b": NONE},
        "alice", {G: NONE, "team-b": GROUP_DENIED}),
    Row("OffsetDelete: GROUP DELETE, then TOPIC READ per topic",
        lambda: offset_delete("team-a-x", su.TOPIC, SECRET),
        lambda r: (int(r.error_code), per_topic()(r)),
        "alice", (NONE, {su.TOPIC: {NONE}, SECRET: {TOPIC_DENIED}}),
        "carol", (GROUP_DENIED, {})),
    Row("DescribeGroups: GROUP DESCRIBE per group", lambda: describe_groups(G, "team-b"),
        per_group, "alice", {G: NONE, "team-b": GROUP_DENIED},
        "bob", {G: GROUP_DENIED, "team-b": NONE}),
    Row("DeleteGroups: GROUP DELETE per group", lambda: delete_groups("team-a-del"),
        results("results", "group_id"), "alice", {"team-a-del": NONE},
        "carol", {"team-a-del": GROUP_DENIED}),
    Row("FindCoordinator v3: GROUP DESCRIBE", lambda: find_coordinator(G), top,
        "alice", NONE, "bob", GROUP_DENIED),
    Row("FindCoordinator v4: per key", lambda: find_coordinators(G, "team-b"),
        results("coordinators", "key"), "alice", {G: NONE, "team-b": GROUP_DENIED},
        "bob", {G: GROUP_DENIED, "team-b": NONE}),
    Row("FindCoordinator: TRANSACTIONAL_ID DESCRIBE", lambda: find_coordinator("tx", 1), top,
        "admin", None, "alice", TXN_DENIED),  # (allowed: groupcoord has no transactions)
    Row("Metadata: TOPIC DESCRIBE per named topic", lambda: metadata(su.TOPIC, SECRET),
        results("topics"), "admin", {su.TOPIC: NONE, SECRET: NONE},
        "alice", {su.TOPIC: NONE, SECRET: TOPIC_DENIED}),
    Row("ListOffsets: TOPIC DESCRIBE", lambda: list_offsets(su.TOPIC), per_topic(),
        "alice", {su.TOPIC: {NONE}}, "bob", {su.TOPIC: {TOPIC_DENIED}}),
    Row("Fetch: TOPIC READ", lambda: fetch(su.TOPIC),
        per_topic("responses", "topic"), "alice", {su.TOPIC: {NONE}},
        "bob", {su.TOPIC: {TOPIC_DENIED}}),
    Row("Produce: TOPIC WRITE", lambda: produce_request(su.TOPIC, 0, ["k"]),
        per_topic("responses", "name", "partition_responses"), "alice", None,
        "bob", {su.TOPIC: {TOPIC_DENIED}}),
    Row("CreateTopics: TOPIC CREATE", lambda: create_topics("new-c"), results("topics"),
        "alice", {"new-c": NONE}, "bob", {"new-c": TOPIC_DENIED}),
    Row("CreateTopics: CLUSTER CREATE is not needed for a topic with TOPIC CREATE",
        lambda: create_topics("other-c"), results("topics"),
        "admin", {"other-c": NONE}, "alice", {"other-c": TOPIC_DENIED}),
    Row("CreatePartitions: TOPIC ALTER", lambda: create_partitions("new-p", 4),
        results("results"), "alice", {"new-p": NONE}, "carol", {"new-p": TOPIC_DENIED}),
    Row("DeleteTopics: TOPIC DELETE", lambda: delete_topics("new-d"), results("responses"),
        "alice", {"new-d": NONE}, "bob", {"new-d": TOPIC_DENIED}),
    Row("CreateAcls: CLUSTER ALTER", create_acls, lambda r: [x.error_code for x in r.results],
        "admin", [NONE], "alice", [CLUSTER_DENIED]),
    Row("DescribeAcls: CLUSTER DESCRIBE", describe_acls, top, "carol", NONE, "alice",
        CLUSTER_DENIED),
    Row("DeleteAcls: CLUSTER ALTER", delete_acls,
        lambda r: [x.error_code for x in r.filter_results], "admin", None, "carol",
        [CLUSTER_DENIED]),
    Row("DescribeUserScramCredentials: CLUSTER DESCRIBE", describe_scram, top, "carol", NONE,
        "bob", CLUSTER_DENIED),
    Row("AlterUserScramCredentials: CLUSTER ALTER", alter_scram,
        lambda r: [x.error_code for x in r.results], "admin", None, "carol", [CLUSTER_DENIED]),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.what for r in ROWS])
async def test_the_authorization_matrix(acl_server: rc.Broker, row: Row) -> None:
    # The denied one first: a denial must leave the resource as it was for the allowed one.
    denied = row.extract(await ask(acl_server, row.denied, row.request()))
    assert denied == row.denied_answer, f"{row.denied}: {denied}"
    allowed = row.extract(await ask(acl_server, row.allowed, row.request()))
    if row.allowed_answer is None:  # the API's own answer, whatever it is, but not a denial
        assert not {TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED} & set(_codes(allowed)), allowed
    else:
        assert allowed == row.allowed_answer, f"{row.allowed}: {allowed}"


def _codes(answer: Any) -> list[int]:
    if isinstance(answer, dict):
        return [c for v in answer.values() for c in _codes(v)]
    if isinstance(answer, list | set | tuple):
        return [c for v in answer for c in _codes(v)]
    return [int(answer)]


async def test_without_group_delete_a_group_cannot_be_deleted(acl_server: rc.Broker) -> None:
    answer = await ask(acl_server, "carol", delete_groups(G))
    assert {r.group_id: r.error_code for r in answer.results} == {G: GROUP_DENIED}
    # still there, offsets and all
    still = await ask(acl_server, "admin", offset_fetch(G, (SECRET,)))
    assert {p.committed_offset for t in still.topics for p in t.partitions} == {5, 6}
    listed = await ask(acl_server, "admin", list_groups())
    assert G in {g.group_id for g in listed.groups}


async def test_list_groups_hides_the_groups_a_principal_may_not_describe(
    acl_server: rc.Broker,
) -> None:
    async def listed(principal: str) -> set[str]:
        answer = await ask(acl_server, principal, list_groups())
        assert answer.error_code == NONE, answer
        return {g.group_id for g in answer.groups}

    everything = await listed("admin")
    assert {"team-a", "team-a-x", "team-a-denied", "team-b", "team-c"} <= everything
    assert await listed("carol") == everything  # CLUSTER DESCRIBE: all of them
    assert await listed("bob") == {"team-b"}
    alices = await listed("alice")
    # the prefixed team-a READ (which implies DESCRIBE; a DENY of READ does not deny DESCRIBE,
    # as in Kafka); nothing of team-b/team-c
    assert "team-a" in alices and "team-a-x" in alices and "team-a-denied" in alices
    assert not alices & {"team-b", "team-c"}
    assert alices == {g for g in everything if g.startswith("team-a")}


async def test_offset_fetch_of_all_topics_hides_the_undescribable_ones(
    acl_server: rc.Broker,
) -> None:
    admins = await ask(acl_server, "admin", offset_fetch("team-c", None))
    assert {t.name for t in admins.topics} == {su.TOPIC, SECRET}
    # carol may describe the group team-a but no topic at all; alice may describe t only
    alices = await ask(acl_server, "alice", offset_fetch(G, None))
    assert alices.error_code == NONE and {t.name for t in alices.topics} == {su.TOPIC}
    carols = await ask(acl_server, "carol", offset_fetch(G, None))
    assert carols.error_code == NONE and carols.topics == ()
    v8 = await ask(acl_server, "alice", offset_fetch_groups(G))
    assert [(g.group_id, g.error_code, {t.name for t in g.topics}) for g in v8.groups] == [
        (G, NONE, {su.TOPIC})]


async def test_metadata_of_all_topics_hides_the_undescribable_ones(
    acl_server: rc.Broker,
) -> None:
    names = {t.name for t in (await ask(acl_server, "alice", metadata())).topics}
    assert su.TOPIC in names and SECRET not in names
    assert {t.name for t in (await ask(acl_server, "bob", metadata())).topics} == set()


async def test_create_acls_without_cluster_alter_is_refused_and_changes_nothing(
    acl_server: rc.Broker,
) -> None:
    before = await ask(acl_server, "admin", describe_acls())
    answer = await ask(acl_server, "carol", create_acls())  # carol has CLUSTER DESCRIBE only
    assert [r.error_code for r in answer.results] == [CLUSTER_DENIED]
    after = await ask(acl_server, "admin", describe_acls())
    assert after.resources == before.resources
    assert "denied CreateAcls from User:carol" in acl_server.log_path.read_text()


# ------------------------------------------------------------ TxnOffsetCommit: a sidecar's only

TXN_ID_T = 5
TXN_ACLS = [
    ("User:alice", TXN_ID_T, "tx-", PREFIXED, WRITE, ALLOW),
    ("User:alice", GROUP_T, "eos", LITERAL, READ, ALLOW),
    ("User:alice", TOPIC_T, su.TOPIC, LITERAL, READ, ALLOW),
    ("User:bob", GROUP_T, "eos", LITERAL, READ, ALLOW),
    ("User:bob", TOPIC_T, su.TOPIC, LITERAL, READ, ALLOW),
    ("User:carol", TXN_ID_T, "tx-", PREFIXED, WRITE, ALLOW),
    ("User:carol", TOPIC_T, su.TOPIC, LITERAL, READ, ALLOW),
]
NOT_DENIED = "not denied"  # the transaction's own answer (none is open): not an ACL's
TXN_ROWS = [  # (what, principal, transactional id, topics, answer per topic)
    ("TRANSACTIONAL_ID WRITE first", "bob", "tx-b", (su.TOPIC,), {su.TOPIC: {TXN_DENIED}}),
    ("TRANSACTIONAL_ID WRITE on that id", "alice", "other", (su.TOPIC,),
     {su.TOPIC: {TXN_DENIED}}),
    ("then GROUP READ", "carol", "tx-c", (su.TOPIC,), {su.TOPIC: {GROUP_DENIED}}),
    ("then TOPIC READ per topic", "alice", "tx-a", (su.TOPIC, SECRET),
     {su.TOPIC: NOT_DENIED, SECRET: {TOPIC_DENIED}}),
    ("a super user", "admin", "any", (su.TOPIC, SECRET),
     {su.TOPIC: NOT_DENIED, SECRET: NOT_DENIED}),
]


def txn_offset_commit(txn_id: str, topics: tuple[str, ...]) -> Any:
    def k(cls: str, **fields: Any) -> Any:
        import importlib

        module = importlib.import_module("kio.schema.txn_offset_commit.v3.request")
        return getattr(module, cls)(**fields)

    return k("TxnOffsetCommitRequest", transactional_id=txn_id, group_id="eos", producer_id=0,
             producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
             topics=tuple(k("TxnOffsetCommitRequestTopic", name=t, partitions=(
                 k("TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=1,
                   committed_leader_epoch=-1, committed_metadata=""),)) for t in topics))


async def test_txn_offset_commit_through_a_secured_sidecar(stack: Stack,
                                                           users_file: Path) -> None:
    """KafkaApis.handleTxnOffsetCommitRequest's order: TRANSACTIONAL_ID WRITE, else every
    partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED; GROUP READ, else GROUP_AUTHORIZATION_FAILED;
    TOPIC READ per topic, else that topic's partitions TOPIC_AUTHORIZATION_FAILED."""
    from coordinator.sidecar import rewrite
    from tests.support.sidecar_util import create_topic

    tansu = stack.tansu()
    for topic in TOPICS:
        await create_topic(tansu.bootstrap, topic, 1)
    args = su.security_args("SASL_PLAINTEXT", None, users_file, authorizer=True)
    sidecar = stack.sidecar(tansu.bootstrap, *args)
    admin = await su.login(sidecar.port, "admin")
    try:
        await create_all(admin, TXN_ACLS)
    finally:
        admin.close()
    answers = {}
    for what, principal, txn_id, topics, _ in TXN_ROWS:
        client = await su.login(sidecar.port, principal)
        try:
            await client.send(txn_offset_commit(txn_id, topics))
            response = rewrite.decode_response(28, 3, await client.receive())
        finally:
            client.close()
        answers[what] = {
            t.name: NOT_DENIED
            if not {p.error_code for p in t.partitions} & {TXN_DENIED, GROUP_DENIED, TOPIC_DENIED}
            else {int(p.error_code) for p in t.partitions}
            for t in response.topics
        }
    assert answers == {what: want for what, *_, want in TXN_ROWS}, sidecar.log()
    assert "denied TxnOffsetCommit from User:bob" in sidecar.log()
