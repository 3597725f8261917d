"""Kafka's authorization matrix for every API groupcoord answers (issue 22), as KafkaApis applies
it: which operation on which resource each request needs, and what a denied one answers.

`plan(header, request, may)` returns what to do with a request, given `may(operation, resource
type, name) -> bool` (coordinator.security.acl.Authorizer.authorize for the caller):
- `error`: answer the whole request with this error (a group-level denial: the group API's
  error response, coordinator.serve.adapters.error_response);
- otherwise route `request` (the original, or a copy without the resources it may not touch),
  then apply `amend` to the response: it puts the denied resources back with their error, or
  drops what the caller may not see, as Kafka answers.

The matrix (KafkaApis, Kafka 3.9/4.0): what each API needs, and what a denial answers.
- JoinGroup, SyncGroup, Heartbeat, LeaveGroup: GROUP READ, else GROUP_AUTHORIZATION_FAILED.
- OffsetCommit: GROUP READ (else the group's error); TOPIC READ per topic, else that topic's
  partitions TOPIC_AUTHORIZATION_FAILED.
- TxnOffsetCommit (sidecar only; KafkaApis.handleTxnOffsetCommitRequest): TRANSACTIONAL_ID
  WRITE on its transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED; then GROUP READ,
  else GROUP_AUTHORIZATION_FAILED (both for every partition: the API has no top-level error);
  then TOPIC READ per topic, as OffsetCommit. The producer id is not judged (implied by the
  transactional id, as in Kafka).
- OffsetFetch: GROUP DESCRIBE (else the group's error); TOPIC DESCRIBE per topic: a named topic
  answers TOPIC_AUTHORIZATION_FAILED, "all topics" leaves it out.
- OffsetDelete: GROUP DELETE (else the group's error); TOPIC READ per topic.
- DescribeGroups, DeleteGroups: GROUP DESCRIBE / GROUP DELETE per group, else that group
  GROUP_AUTHORIZATION_FAILED.
- ListGroups: CLUSTER DESCRIBE lists all; otherwise the groups it may not DESCRIBE are left out.
- FindCoordinator: GROUP DESCRIBE (key type 0) or TRANSACTIONAL_ID DESCRIBE (1), else
  GROUP_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
- Metadata: TOPIC DESCRIBE per topic: a named topic answers TOPIC_AUTHORIZATION_FAILED (and is
  not auto-created), "all topics" leaves it out.
- ListOffsets (TOPIC DESCRIBE), Fetch (TOPIC READ), Produce (TOPIC WRITE): per topic, else its
  partitions TOPIC_AUTHORIZATION_FAILED.
- CreateTopics (CLUSTER CREATE, else TOPIC CREATE), DeleteTopics (TOPIC DELETE),
  CreatePartitions (TOPIC ALTER): per topic, else TOPIC_AUTHORIZATION_FAILED.
- CreateAcls, DeleteAcls, AlterUserScramCredentials need CLUSTER ALTER; DescribeAcls and
  DescribeUserScramCredentials CLUSTER DESCRIBE; else CLUSTER_AUTHORIZATION_FAILED.
- ShareGroupHeartbeat (KIP-932, Kafka 4.4): GROUP READ, else GROUP_AUTHORIZATION_FAILED; then
  TOPIC DESCRIBE on every subscribed topic named, else TOPIC_AUTHORIZATION_FAILED for the request.
  ShareGroupDescribe: as DescribeGroups.
- ApiVersions, SaslHandshake, SaslAuthenticate need nothing.

Pure: no I/O.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from coordinator.broker.answers import make
from coordinator.broker.security_admin import (
    ALTER_USER_SCRAM_CREDENTIALS,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
)
from coordinator.security.acl import CLUSTER_NAME, Operation, ResourceType
from protocol import apis
from protocol.codec import RequestHeader

E = ErrorCode
READ, DESCRIBE, DELETE = Operation.READ, Operation.DESCRIBE, Operation.DELETE
GROUP, TOPIC, CLUSTER = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER
May = Callable[[Operation, ResourceType, str], bool]
Amend = Callable[[Any], Any]
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
TXN_OFFSET_COMMIT = 28  # not in protocol.apis: the sidecar answers it (coordinator.sidecar.txn)
_FREE = frozenset({apis.API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
_SINGLE_GROUP_READ = frozenset(
    {apis.JOIN_GROUP, apis.SYNC_GROUP, apis.HEARTBEAT, apis.LEAVE_GROUP,
     apis.CONSUMER_GROUP_HEARTBEAT}  # KIP-848: READ on the group, as Kafka
)  # fmt: skip
_CLUSTER_OPS = {
    CREATE_ACLS: Operation.ALTER,
    DELETE_ACLS: Operation.ALTER,
    ALTER_USER_SCRAM_CREDENTIALS: Operation.ALTER,
    DESCRIBE_ACLS: DESCRIBE,
    DESCRIBE_USER_SCRAM_CREDENTIALS: DESCRIBE,
}


class Plan(NamedTuple):
    request: Any = None
    amend: Amend | None = None
    error: ErrorCode | None = None


Handler = Callable[[RequestHeader, Any, May], Plan]


def _nested(response: Any, *names: str) -> type:
    module = sys.modules[type(response).__module__]
    for name in names:
        cls = getattr(module, name, None)
        if cls is not None:
            return cls  # type: ignore[no-any-return]
    raise LookupError(f"{type(response).__name__} has none of {names}")


def plan(header: RequestHeader, request: Any, may: May) -> Plan:
    """What to do with `request` for a caller whose permissions `may` answers."""
    key = header.api_key
    if key in _FREE:
        return Plan(request)
    if key in _SINGLE_GROUP_READ:
        return Plan(request) if may(READ, GROUP, request.group_id) else _group_denied()
    handler = _HANDLERS.get(key)
    if handler is not None:
        return handler(header, request, may)
    operation = _CLUSTER_OPS.get(key)
    if operation is not None:
        if may(operation, CLUSTER, CLUSTER_NAME):
            return Plan(request)
        return Plan(error=E.cluster_authorization_failed)
    raise LookupError(f"no authorization rule for API {key}")


def _group_denied() -> Plan:
    return Plan(error=E.group_authorization_failed)


def _split(items: Any, allowed: Callable[[Any], bool]) -> tuple[tuple[Any, ...], list[Any]]:
    kept: list[Any] = []
    denied: list[Any] = []
    for item in items:
        (kept if allowed(item) else denied).append(item)
    return tuple(kept), denied


# -- offsets ---------------------------------------------------------------------------------------


def _group_and_topics(group_operation: Operation, prefix: str) -> Handler:
    """OffsetCommit (GROUP READ) and OffsetDelete (GROUP DELETE): the group first, then TOPIC
    READ per topic, whose denied partitions come back in the response's `<prefix>Topic`s."""

    def handler(header: RequestHeader, request: Any, may: May) -> Plan:
        if not may(group_operation, GROUP, request.group_id):
            return _group_denied()
        kept, denied = _split(request.topics, lambda t: may(READ, TOPIC, t.name))
        if not denied:
            return Plan(request)

        def amend(response: Any) -> Any:
            topic_cls = _nested(response, f"{prefix}Topic")
            partition_cls = _nested(response, f"{prefix}Partition")
            extra = tuple(
                topic_cls(
                    name=t.name,
                    partitions=tuple(
                        partition_cls(
                            partition_index=p.partition_index,
                            error_code=E.topic_authorization_failed,
                        )
                        for p in t.partitions
                    ),
                )
                for t in denied
            )
            return replace(response, topics=(*response.topics, *extra))

        return Plan(replace(request, topics=kept), amend)

    return handler


def _txn_offset_commit(header: RequestHeader, request: Any, may: May) -> Plan:
    if not may(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return Plan(error=E.transactional_id_authorization_failed)
    return _offset_commit_topics(header, request, may)


_offset_commit_topics = _group_and_topics(READ, "TxnOffsetCommitResponse")


def _fetched_partition(cls: type, index: int) -> Any:
    return make(
        cls,
        partition_index=index,
        committed_offset=-1,
        committed_leader_epoch=-1,
        metadata="",
        error_code=E.topic_authorization_failed,
    )


def _offset_fetch(header: RequestHeader, request: Any, may: May) -> Plan:
    if header.api_version >= 8:
        return _offset_fetch_groups(request, may)
    if not may(DESCRIBE, GROUP, request.group_id):
        return _group_denied()
    if request.topics is None:  # every topic: the ones it may not describe are left out
        return Plan(request, lambda r: replace(r, topics=_describable(r.topics, may)))
    kept, denied = _split(request.topics, lambda t: may(DESCRIBE, TOPIC, t.name))
    if not denied:
        return Plan(request)

    def amend(response: Any) -> Any:
        topic_cls = _nested(response, "OffsetFetchResponseTopic")
        partition_cls = _nested(response, "OffsetFetchResponsePartition")
        extra = tuple(
            topic_cls(
                name=t.name,
                partitions=tuple(_fetched_partition(partition_cls, p) for p in t.partition_indexes),
            )
            for t in denied
        )
        return replace(response, topics=(*response.topics, *extra))

    return Plan(replace(request, topics=kept), amend)


def _describable(topics: Any, may: May) -> tuple[Any, ...]:
    return tuple(t for t in topics if may(DESCRIBE, TOPIC, t.name))


def _offset_fetch_groups(request: Any, may: May) -> Plan:
    """OffsetFetch v8+: several groups, each judged on its own."""
    kept_groups, denied_groups = _split(request.groups, lambda g: may(DESCRIBE, GROUP, g.group_id))
    denied_topics: dict[str, list[Any]] = {}
    all_topics: set[str] = set()
    filtered = []
    for g in kept_groups:
        if g.topics is None:
            all_topics.add(g.group_id)
            filtered.append(g)
            continue
        kept, denied = _split(g.topics, lambda t: may(DESCRIBE, TOPIC, t.name))
        denied_topics[g.group_id] = denied
        filtered.append(replace(g, topics=kept))
    if not denied_groups and not all_topics and not any(denied_topics.values()):
        return Plan(request)

    def amend(response: Any) -> Any:
        group_cls = _nested(response, "OffsetFetchResponseGroup")
        topic_cls = _nested(response, "OffsetFetchResponseTopics")
        partition_cls = _nested(response, "OffsetFetchResponsePartitions")
        groups = []
        for g in response.groups:
            topics = g.topics
            if g.group_id in all_topics:
                topics = _describable(topics, may)
            extra = tuple(
                topic_cls(
                    name=t.name,
                    partitions=tuple(
                        _fetched_partition(partition_cls, p) for p in t.partition_indexes
                    ),
                )
                for t in denied_topics.get(g.group_id, ())
            )
            groups.append(replace(g, topics=(*topics, *extra)))
        groups += [
            group_cls(group_id=g.group_id, topics=(), error_code=E.group_authorization_failed)
            for g in denied_groups
        ]
        return replace(response, groups=tuple(groups))

    return Plan(replace(request, groups=tuple(filtered)), amend)


# -- groups ----------------------------------------------------------------------------------------


def _describe(groups_field: str) -> Handler:
    """DescribeGroups and ConsumerGroupDescribe (KIP-848): DESCRIBE on each group; the denied ones
    are answered GROUP_AUTHORIZATION_FAILED after the others (`make` keeps the fields each API's
    DescribedGroup has)."""

    def handler(header: RequestHeader, request: Any, may: May) -> Plan:
        kept, denied = _split(getattr(request, groups_field), lambda g: may(DESCRIBE, GROUP, g))
        if not denied:
            return Plan(request)

        def amend(response: Any) -> Any:
            group_cls = _nested(response, "DescribedGroup")
            extra = tuple(
                make(group_cls, error_code=E.group_authorization_failed, group_id=g,
                     group_state="", protocol_type="", protocol_data="", members=(),
                     authorized_operations=-(2**31), group_epoch=-1, assignment_epoch=-1,
                     assignor_name="")
                for g in denied
            )  # fmt: skip
            return replace(response, groups=(*response.groups, *extra))

        return Plan(replace(request, **{groups_field: kept}), amend)

    return handler


def _list_groups(header: RequestHeader, request: Any, may: May) -> Plan:
    if may(DESCRIBE, CLUSTER, CLUSTER_NAME):
        return Plan(request)
    return Plan(
        request,
        lambda r: replace(r, groups=tuple(g for g in r.groups if may(DESCRIBE, GROUP, g.group_id))),
    )


def _delete_groups(header: RequestHeader, request: Any, may: May) -> Plan:
    kept, denied = _split(request.groups_names, lambda g: may(DELETE, GROUP, g))
    if not denied:
        return Plan(request)

    def amend(response: Any) -> Any:
        result_cls = _nested(response, "DeletableGroupResult")
        extra = tuple(
            result_cls(group_id=g, error_code=E.group_authorization_failed) for g in denied
        )
        return replace(response, results=(*response.results, *extra))

    return Plan(replace(request, groups_names=kept), amend)


def _find_coordinator(header: RequestHeader, request: Any, may: May) -> Plan:
    def allowed(key_type: int, key: str) -> ErrorCode | None:
        if key_type == 1:
            if may(DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
                return None
            return E.transactional_id_authorization_failed
        return None if may(DESCRIBE, GROUP, key) else E.group_authorization_failed

    if header.api_version < 4:
        error = allowed(getattr(request, "key_type", 0), request.key)
        if error is None:
            return Plan(request)
        return Plan(
            request,
            lambda r: make(
                type(r),
                throttle_time=getattr(r, "throttle_time", None),
                error_code=error,
                error_message=None,
                node_id=-1,
                host="",
                port=-1,
            ),
        )
    errors = {k: e for k in request.coordinator_keys if (e := allowed(request.key_type, k))}
    if not errors:
        return Plan(request)

    def amend(response: Any) -> Any:
        return replace(
            response,
            coordinators=tuple(
                replace(c, node_id=-1, host="", port=-1, error_code=errors[c.key])
                if c.key in errors
                else c
                for c in response.coordinators
            ),
        )

    return Plan(request, amend)


# -- topics ----------------------------------------------------------------------------------------


def _metadata(header: RequestHeader, request: Any, may: May) -> Plan:
    if request.topics is None:
        return Plan(request, lambda r: replace(r, topics=_describable(r.topics, may)))
    kept, denied = _split(request.topics, lambda t: t.name is None or may(DESCRIBE, TOPIC, t.name))
    if not denied:
        return Plan(request)

    def amend(response: Any) -> Any:
        topic_cls = _nested(response, "MetadataResponseTopic")
        extra = tuple(
            make(
                topic_cls,
                error_code=E.topic_authorization_failed,
                name=t.name,
                topic_id=getattr(t, "topic_id", None),
                is_internal=False,
                partitions=(),
                topic_authorized_operations=-(2**31),
            )
            for t in denied
        )
        return replace(response, topics=(*response.topics, *extra))

    return Plan(replace(request, topics=kept), amend)


def _per_partition(
    operation: Operation,
    topics_field: str,
    topic_name: str,
    response_field: str,
    cls_names: tuple[str, str],
    partitions: tuple[str, str, str, str],
    partition_fields: dict[str, Any],
) -> Handler:
    """A request over topics and partitions whose denied topics answer per partition.
    `cls_names`: the response's topic and partition classes; `partitions`: the request's
    partitions field and partition index field, then the response's."""
    topic_cls_name, partition_cls_name = cls_names
    req_partitions, req_index, resp_partitions, resp_index = partitions

    def handler(header: RequestHeader, request: Any, may: May) -> Plan:
        kept, denied = _split(
            getattr(request, topics_field), lambda t: may(operation, TOPIC, getattr(t, topic_name))
        )
        if not denied:
            return Plan(request)

        def amend(response: Any) -> Any:
            topic_cls = _nested(response, topic_cls_name)
            partition_cls = _nested(response, partition_cls_name)
            extra = tuple(
                make(
                    topic_cls,
                    **{
                        topic_name: getattr(t, topic_name),
                        resp_partitions: tuple(
                            make(
                                partition_cls,
                                **{resp_index: getattr(p, req_index)},
                                error_code=E.topic_authorization_failed,
                                **partition_fields,
                            )
                            for p in getattr(t, req_partitions)
                        ),
                    },
                )
                for t in denied
            )
            answered = getattr(response, response_field)
            return replace(response, **{response_field: (*answered, *extra)})

        return Plan(replace(request, **{topics_field: kept}), amend)

    return handler


def _topic_admin(
    operation: Operation, topics_field: str, response_field: str, result_cls_name: str
) -> Handler:
    def handler(header: RequestHeader, request: Any, may: May) -> Plan:
        cluster = operation is Operation.CREATE and may(Operation.CREATE, CLUSTER, CLUSTER_NAME)
        field = topics_field if hasattr(request, topics_field) else "topics"  # DeleteTopics v6

        def allowed(t: Any) -> bool:
            name = t if isinstance(t, str) else t.name
            # (DeleteTopics v6 may name a topic by id only: denied, as its name cannot be judged)
            return cluster or (name is not None and may(operation, TOPIC, name))

        kept, denied = _split(getattr(request, field), allowed)
        if not denied:
            return Plan(request)

        def amend(response: Any) -> Any:
            result_cls = _nested(response, result_cls_name)
            extra = tuple(
                make(
                    result_cls,
                    name=t if isinstance(t, str) else t.name,
                    topic_id=getattr(t, "topic_id", None),
                    error_code=E.topic_authorization_failed,
                    error_message="Authorization failed.",
                    topic_config_error_code=E.none,
                    num_partitions=-1,
                    replication_factor=-1,
                    configs=(),
                )
                for t in denied
            )
            answered = getattr(response, response_field)
            return replace(response, **{response_field: (*answered, *extra)})

        return Plan(replace(request, **{field: kept}), amend)

    return handler


def _share_group_heartbeat(header: RequestHeader, request: Any, may: May) -> Plan:
    """KafkaApis.handleShareGroupHeartbeat: READ on the group, then DESCRIBE on each topic the
    request subscribes to (clients may not learn of topics they cannot describe)."""
    if not may(READ, GROUP, request.group_id):
        return _group_denied()
    for topic in request.subscribed_topic_names or ():
        if not may(DESCRIBE, TOPIC, topic):
            return Plan(error=E.topic_authorization_failed)
    return Plan(request)


def _group_configs(operation: Operation) -> Handler:
    """DescribeConfigs / IncrementalAlterConfigs on GROUP resources: DESCRIBE_CONFIGS or
    ALTER_CONFIGS on each group. Kafka answers each denied resource GROUP_AUTHORIZATION_FAILED;
    here one denied group refuses the whole request with it (a simplification)."""

    def handler(header: RequestHeader, request: Any, may: May) -> Plan:
        if all(may(operation, GROUP, r.resource_name) for r in request.resources):
            return Plan(request)
        return _group_denied()

    return handler


_NO_DATA = {
    "high_watermark": -1,
    "last_stable_offset": -1,
    "log_start_offset": -1,
    "aborted_transactions": None,
    "preferred_read_replica": -1,
    "records": None,
}

_HANDLERS: dict[int, Handler] = {
    apis.OFFSET_COMMIT: _group_and_topics(READ, "OffsetCommitResponse"),
    TXN_OFFSET_COMMIT: _txn_offset_commit,
    apis.OFFSET_FETCH: _offset_fetch,
    apis.OFFSET_DELETE: _group_and_topics(DELETE, "OffsetDeleteResponse"),
    apis.DESCRIBE_GROUPS: _describe("groups"),
    apis.CONSUMER_GROUP_DESCRIBE: _describe("group_ids"),
    apis.SHARE_GROUP_HEARTBEAT: _share_group_heartbeat,
    apis.SHARE_GROUP_DESCRIBE: _describe("group_ids"),
    apis.LIST_GROUPS: _list_groups,
    apis.DESCRIBE_CONFIGS: _group_configs(Operation.DESCRIBE_CONFIGS),
    apis.INCREMENTAL_ALTER_CONFIGS: _group_configs(Operation.ALTER_CONFIGS),
    apis.DELETE_GROUPS: _delete_groups,
    apis.FIND_COORDINATOR: _find_coordinator,
    apis.METADATA: _metadata,
    apis.LIST_OFFSETS: _per_partition(
        DESCRIBE, "topics", "name", "topics",
        ("ListOffsetsTopicResponse", "ListOffsetsPartitionResponse"),
        ("partitions", "partition_index", "partitions", "partition_index"),
        {"timestamp": -1, "offset": -1, "leader_epoch": -1},
    ),
    apis.FETCH: _per_partition(
        READ, "topics", "topic", "responses", ("FetchableTopicResponse", "PartitionData"),
        ("partitions", "partition", "partitions", "partition_index"), _NO_DATA,
    ),
    apis.PRODUCE: _per_partition(
        Operation.WRITE, "topic_data", "name", "responses",
        ("TopicProduceResponse", "PartitionProduceResponse"),
        ("partition_data", "index", "partition_responses", "index"),
        {"base_offset": -1, "log_append_time": None, "log_start_offset": -1, "record_errors": (),
         "error_message": None},
    ),
    apis.CREATE_TOPICS: _topic_admin(Operation.CREATE, "topics", "topics", "CreatableTopicResult"),
    apis.DELETE_TOPICS: _topic_admin(DELETE, "topic_names", "responses", "DeletableTopicResult"),
    apis.CREATE_PARTITIONS: _topic_admin(
        Operation.ALTER, "topics", "results", "CreatePartitionsTopicResult"
    ),
}  # fmt: skip
