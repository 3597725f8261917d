"""The topic admin APIs of standalone mode: CreateTopics (19), DeleteTopics (20), CreatePartitions
(37), so `AdminClient.create_topics / delete_topics / create_partitions` of any client works.

`handle(api_key, version, request, catalog, new_topic_id)` validates a request against the catalog
as Kafka's controller does (ReplicationControlManager) and returns the topic changes to apply,
in order, plus a function that builds the kio response of the request's version. The server
applies each change through `GroupCoordinator.topic_changed` (which persists it) and sends the
response only once those records are durable.

Rules, as Kafka's (KafkaApis / ControllerApis / ReplicationControlManager):
- A name listed twice in one request: every entry for it gets INVALID_REQUEST.
- CreateTopics: an illegal name (Topic.validate) -> INVALID_TOPIC_EXCEPTION; an existing topic ->
  TOPIC_ALREADY_EXISTS; partitions -1 = the broker default (1), 0 or < -1 -> INVALID_PARTITIONS;
  replication factor -1 = the default (1), 0 or < -1 or more than the one broker ->
  INVALID_REPLICATION_FACTOR; manual assignments need both counts -1 (INVALID_REQUEST), partition
  indexes 0..n-1 and only broker 0, the same replica count for every partition
  (INVALID_REPLICA_ASSIGNMENT). Configs are accepted and not kept (v5+ answers no configs).
- CreatePartitions: unknown topic -> UNKNOWN_TOPIC_OR_PARTITION; a count not above the current one
  -> INVALID_PARTITIONS with Kafka's message; assignments must cover exactly the new partitions
  with broker 0 only (INVALID_REPLICA_ASSIGNMENT).
- DeleteTopics: unknown name -> UNKNOWN_TOPIC_OR_PARTITION, unknown id (v6) -> UNKNOWN_TOPIC_ID,
  both or neither of name and id -> INVALID_REQUEST.
- validate_only: every check, no change.
groupcoord is a one-broker cluster (node 0), so the only replica is node 0 and a new topic's
replicas have no rack; racks come from the upstream cluster in sidecar mode.

Pure: no I/O, no clock; ids come from the injected `new_topic_id`.
"""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode

from coordinator.broker.answers import NODE_ID, make
from coordinator.core.topics import MAX_PARTITIONS, TopicCatalog, TopicInfo, topic_name_error
from protocol.apis import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, response_class

E = ErrorCode
TOPIC_ADMIN_APIS: Final = frozenset({CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS})
DEFAULT_PARTITIONS = 1  # num.partitions
DEFAULT_REPLICATION_FACTOR = 1  # default.replication.factor (and the only one we can honour)
_ZERO = timedelta(0)

Change = tuple[str, TopicInfo | None]  # (name, new info or None = deleted)


@dataclass(slots=True)
class AdminOutcome:
    """What a request does: the changes to apply in order, and its response once applied."""

    changes: list[Change] = field(default_factory=list)
    build: Callable[[], Any] = lambda: None
    failed: Callable[[ErrorCode], Any] = lambda error: None  # every topic answered with `error`


def _nested(cls: type, name: str) -> type:
    return getattr(sys.modules[cls.__module__], name)  # type: ignore[no-any-return]


def _duplicates(names: Iterable[str | None]) -> set[str | None]:
    return {n for n, c in Counter(names).items() if c > 1}


# --------------------------------------------------------------------------------------------------
# CreateTopics (19)


@dataclass(frozen=True, slots=True)
class _Created:
    name: str
    error: ErrorCode
    message: str | None
    info: TopicInfo | None = None  # the topic as created (or as it would be, validate_only)


def _create_one(topic: Any, catalog: TopicCatalog, new_id: Callable[[], uuid.UUID]) -> _Created:
    name = topic.name
    reason = topic_name_error(name)
    if reason is not None:
        return _Created(name, E.invalid_topic_exception, reason)
    if name in catalog:
        return _Created(name, E.topic_already_exists, f"Topic '{name}' already exists.")
    partitions, factor = topic.num_partitions, topic.replication_factor
    if topic.assignments:
        if partitions != -1 or factor != -1:
            return _Created(
                name,
                E.invalid_request,
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.",
            )
        error = _assignment_error(topic.assignments, first=0)
        if error is not None:
            return _Created(name, E.invalid_replica_assignment, error)
        partitions = len(topic.assignments)
    else:
        if partitions == -1:
            partitions = DEFAULT_PARTITIONS
        if factor == -1:
            factor = DEFAULT_REPLICATION_FACTOR
        if partitions <= 0:
            return _Created(
                name,
                E.invalid_partitions,
                "Number of partitions was set to an invalid non-positive value.",
            )
        if factor <= 0:
            return _Created(
                name,
                E.invalid_replication_factor,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        if factor > 1:
            return _Created(
                name,
                E.invalid_replication_factor,
                f"Unable to replicate the partition {factor} time(s): The target replication "
                f"factor of {factor} cannot be reached because only 1 broker(s) are registered.",
            )
    if partitions > MAX_PARTITIONS:
        return _Created(
            name, E.invalid_partitions, f"Number of partitions may not exceed {MAX_PARTITIONS}."
        )
    return _Created(name, E.none, None, TopicInfo(name, new_id(), partitions))


def _assignment_error(assignments: Iterable[Any], first: int) -> str | None:
    """Manual replica assignments: partitions first.. in order, replicas only on broker 0."""
    sizes = set()
    for i, a in enumerate(assignments):
        index = getattr(a, "partition_index", first + i)
        if index != first + i:
            return "Partitions should be 0-based and consecutive in the replica assignment."
        brokers = list(a.broker_ids)
        if not brokers:
            return "The manual partition assignment includes an empty replica list."
        if len(set(brokers)) != len(brokers):
            return "The manual partition assignment includes duplicate broker ids."
        unknown = [b for b in brokers if b != NODE_ID]
        if unknown:
            return (
                f"The manual partition assignment includes broker {unknown[0]}, but no such "
                "broker is registered."
            )
        sizes.add(len(brokers))
    if len(sizes) > 1:
        return (
            "All partitions in the manual partition assignment must have the same number of "
            "replicas."
        )
    return None


def create_topics(
    version: int, request: Any, catalog: TopicCatalog, new_id: Callable[[], uuid.UUID]
) -> AdminOutcome:
    cls = response_class(CREATE_TOPICS, version)
    result_cls = _nested(cls, "CreatableTopicResult")
    dupes = _duplicates(t.name for t in request.topics)
    results: list[_Created] = []
    outcome = AdminOutcome()
    for topic in request.topics:
        if topic.name in dupes:
            message = f"Create topics request contains multiple entries for {topic.name}"
            results.append(_Created(topic.name, E.invalid_request, message))
            continue
        created = _create_one(topic, catalog, new_id)
        results.append(created)
        if created.info is not None and not request.validate_only:
            outcome.changes.append((created.name, created.info))

    def result(r: _Created, error: ErrorCode, message: str | None) -> Any:
        ok = error is E.none and r.info is not None
        return make(
            result_cls,
            name=r.name,
            topic_id=r.info.topic_id if ok and r.info is not None else None,
            error_code=error,
            error_message=message,
            topic_config_error_code=0,
            num_partitions=r.info.partitions if ok and r.info is not None else -1,
            replication_factor=DEFAULT_REPLICATION_FACTOR if ok else -1,
            configs=() if ok else None,
        )

    outcome.build = lambda: make(
        cls, throttle_time=_ZERO, topics=tuple(result(r, r.error, r.message) for r in results)
    )
    outcome.failed = lambda error: make(
        cls, throttle_time=_ZERO, topics=tuple(result(r, error, None) for r in results)
    )
    return outcome


# --------------------------------------------------------------------------------------------------
# CreatePartitions (37)


def create_partitions(version: int, request: Any, catalog: TopicCatalog) -> AdminOutcome:
    cls = response_class(CREATE_PARTITIONS, version)
    result_cls = _nested(cls, "CreatePartitionsTopicResult")
    dupes = _duplicates(t.name for t in request.topics)
    results: list[tuple[str, ErrorCode, str | None]] = []
    outcome = AdminOutcome()
    for topic in request.topics:
        name = topic.name
        current = catalog.get(name)
        error, message = E.none, None
        if name in dupes:
            error, message = E.invalid_request, "Duplicate topic in request."
        elif current is None:
            error, message = E.unknown_topic_or_partition, f"The topic '{name}' does not exist."
        elif topic.count < current.partitions:
            error = E.invalid_partitions
            message = (
                f"Topic currently has {current.partitions} partitions, which is higher than "
                f"the requested {topic.count}."
            )
        elif topic.count == current.partitions:
            error = E.invalid_partitions
            message = f"Topic already has {current.partitions} partitions."
        elif topic.count > MAX_PARTITIONS:
            error = E.invalid_partitions
            message = f"Number of partitions may not exceed {MAX_PARTITIONS}."
        elif topic.assignments is not None:
            added = topic.count - current.partitions
            if len(topic.assignments) != added:
                error = E.invalid_replica_assignment
                message = (
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(topic.assignments)} assignment(s) were specified."
                )
            else:
                reason = _assignment_error(topic.assignments, first=current.partitions)
                if reason is not None:
                    error, message = E.invalid_replica_assignment, reason
        results.append((name, error, message))
        if error is E.none and current is not None and not request.validate_only:
            outcome.changes.append((name, current.with_partitions(topic.count)))

    outcome.build = lambda: make(
        cls,
        throttle_time=_ZERO,
        results=tuple(
            make(result_cls, name=n, error_code=e, error_message=m) for n, e, m in results
        ),
    )
    outcome.failed = lambda error: make(
        cls,
        throttle_time=_ZERO,
        results=tuple(
            make(result_cls, name=n, error_code=error, error_message=None) for n, _, _ in results
        ),
    )
    return outcome


# --------------------------------------------------------------------------------------------------
# DeleteTopics (20)


def delete_topics(version: int, request: Any, catalog: TopicCatalog) -> AdminOutcome:
    cls = response_class(DELETE_TOPICS, version)
    result_cls = _nested(cls, "DeletableTopicResult")
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    zero_id = uuid.UUID(int=0)
    resolved: list[tuple[str | None, uuid.UUID | None, ErrorCode, str | None]] = []
    for name, given_id in wanted:
        topic_id = None if given_id == zero_id else given_id
        if (name is None) == (topic_id is None):
            resolved.append((name, topic_id, E.invalid_request, "Give a topic name or an id."))
        elif topic_id is not None:
            found = catalog.name_of(topic_id)
            if found is None:
                resolved.append(
                    (None, topic_id, E.unknown_topic_id, "This server does not host this topic ID.")
                )
            else:
                resolved.append((found, topic_id, E.none, None))
        elif name not in catalog:
            resolved.append(
                (
                    name,
                    None,
                    E.unknown_topic_or_partition,
                    "This server does not host this topic-partition.",
                )
            )
        else:
            info = catalog.get(name) if name is not None else None
            resolved.append((name, info.topic_id if info else None, E.none, None))
    dupes = _duplicates(n for n, _, e, _ in resolved if e is E.none)
    outcome = AdminOutcome()
    final: list[tuple[str | None, uuid.UUID | None, ErrorCode, str | None]] = []
    for name, topic_id, error, message in resolved:
        if error is E.none and name in dupes:
            final.append((name, topic_id, E.invalid_request, "Duplicate topic in request."))
            continue
        final.append((name, topic_id, error, message))
        if error is E.none and name is not None:
            outcome.changes.append((name, None))

    def result(n: str | None, i: uuid.UUID | None, e: ErrorCode, m: str | None) -> Any:
        return make(result_cls, name=n, topic_id=i, error_code=e, error_message=m)

    outcome.build = lambda: make(
        cls, throttle_time=_ZERO, responses=tuple(result(*r) for r in final)
    )
    outcome.failed = lambda error: make(
        cls, throttle_time=_ZERO, responses=tuple(result(n, i, error, None) for n, i, _, _ in final)
    )
    return outcome


def handle(
    api_key: int,
    version: int,
    request: Any,
    catalog: TopicCatalog,
    new_topic_id: Callable[[], uuid.UUID] = uuid.uuid4,
) -> AdminOutcome:
    if api_key == CREATE_TOPICS:
        return create_topics(version, request, catalog, new_topic_id)
    if api_key == CREATE_PARTITIONS:
        return create_partitions(version, request, catalog)
    if api_key == DELETE_TOPICS:
        return delete_topics(version, request, catalog)
    raise KeyError(f"not a topic admin API: {api_key}")
