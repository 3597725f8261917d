"""Topic changes as the core sees them: the catalog, its records, and KIP-1101 for classic groups.

Functions of the core's state (`core.state.CoreState`), behind `GroupCoordinator`'s methods of
the same names:
- `topic_changed(state, name, info | None, now_ms) -> Effects`: the one entry point for "topic X now
  looks like this" (None = deleted), whatever its source -- the admin APIs in standalone mode
  (broker.topic_admin), declared `--topic`s at start-up, the upstream cluster in sidecar mode.
  It updates the catalog, persists the topic (records.TopicKey/TopicValue; the runtime releases
  the replies only once that is durable), drops the topic's cached hash, and re-checks exactly the
  groups whose current generation reads the topic (the topic -> groups index of
  coordinator.core.topichash): time proportional to those groups, not to all groups.
- The trigger (seed 002 applied to classic groups, which Kafka itself does not do): a Stable or
  CompletingRebalance group whose metadata hash now differs from the one its generation was formed
  with moves to PreparingRebalance (preceded by GroupMetadataHashChanged), so its members' next
  Heartbeat answers REBALANCE_IN_PROGRESS. The cause names the change: PARTITIONS_ADDED,
  RACKS_CHANGED, TOPIC_CREATED, TOPIC_RECREATED (a new id under a known name, or a name deleted
  within TOPIC_DELETED_LABEL_MS). A group already rebalancing needs nothing: its next generation is
  formed with the current hash. The check runs when the topic changes, so a Heartbeat pays nothing.
- A deleted topic is the exception: the coordinator does not start that rebalance. A forced one
  would race the clients: a leader assigns from its own metadata cache, which still lists the
  topic, so it would hand the deleted partitions out again, and each member would rejoin once more
  when its metadata caught up (two rebalances, the first useless). Instead the members start the
  one rebalance themselves, as they do with Kafka (whose classic coordinator does nothing to its
  groups on a deletion): their Fetch of the topic answers UNKNOWN_TOPIC_OR_PARTITION at once (a
  parked one too), they re-read metadata, see the topic gone and rejoin with it. The group's
  stored hash takes the deletion in (a Stable group's record is rewritten), so a restart does not
  rebalance for it either, and that rejoin is labelled TOPIC_DELETED.
- Loading: topic records replay into the catalog; `topics_loaded` indexes every loaded group and
  compares the hash in its record with the current one, so a restart rebalances a group only if a
  topic it reads changed while groupcoord was down. A stored hash of 0 (a record written before
  this existed, or a generation without topics) is adopted without a rebalance (KIP-1101's upgrade
  rule). `declare_topics` then reconciles the declared `--topic`s with the log.
- A deleted topic's committed offsets are deleted (tombstones), as Kafka's coordinator does on
  `onPartitionsDeleted`, so a re-created topic does not inherit them.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from coordinator.core.effects import Effects
from coordinator.core.events import (
    GroupMetadataHashChanged,
    OffsetsDeleted,
    RebalanceCause,
    RebalanceTrigger,
)
from coordinator.core.group import ClassicGroup, GroupState
from coordinator.core.rebalance import TOPIC_DELETED_LABEL_MS, group_record, prepare_rebalance
from coordinator.core.records import OffsetCommitKey, Record, TopicKey, TopicValue
from coordinator.core.state import CoreState
from coordinator.core.topics import TopicInfo

_WATCHED = (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)


def topic_record(name: str, info: TopicInfo | None) -> Record:
    if info is None:
        return Record(TopicKey(name), None)
    return Record(TopicKey(name), TopicValue(info.topic_id.bytes, info.partitions, info.racks))


def topic_from_record(name: str, value: TopicValue) -> TopicInfo:
    return TopicInfo(name, uuid.UUID(bytes=value.topic_id), value.partitions, value.racks)


def change_cause(
    current: TopicInfo | None, info: TopicInfo | None, recently_deleted: bool
) -> RebalanceCause:
    """Which kind of change `current` -> `info` is (None: absent), as a rebalance cause."""
    if info is None:
        return RebalanceCause.TOPIC_DELETED
    if current is None:
        return RebalanceCause.TOPIC_RECREATED if recently_deleted else RebalanceCause.TOPIC_CREATED
    if current.topic_id != info.topic_id:
        return RebalanceCause.TOPIC_RECREATED
    if current.partitions != info.partitions:
        return RebalanceCause.PARTITIONS_ADDED
    return RebalanceCause.RACKS_CHANGED


def topic_changed(
    state: CoreState, name: str, info: TopicInfo | None, now_ms: int, keep_offsets: bool = False
) -> Effects:
    """Topic `name` now looks like `info` (None: it was deleted). No-op when nothing changed.
    `keep_offsets`: a deletion that is not certain yet (a sidecar's upstream stopped listing the
    topic): the catalog and the groups see it gone, its committed offsets stay until
    `delete_topic_offsets` (or its return under the same id) settles it."""
    fx = Effects()
    topics = state.topics
    current = topics.get(name)
    if info == current:
        return fx
    if info is not None and info.name != name:
        raise ValueError(f"topic_changed({name!r}) with the info of {info.name!r}")
    state.topic_records.add(name)
    cause = change_cause(current, info, _recently_deleted(state, name, now_ms))
    if info is None:
        topics.remove(name)
        if not keep_offsets:
            _delete_topic_offsets(state, name, fx)
        state.deleted_topics_ms[name] = now_ms
    else:
        topics.put(info)
        state.deleted_topics_ms.pop(name, None)
    fx.records.append(topic_record(name, info))
    state.topic_hashes.invalidate(name)
    if not state.loading:
        _recheck(state, state.topic_hashes.readers(name), (name,), cause, now_ms, fx)
    return fx


def _recently_deleted(state: CoreState, name: str, now_ms: int) -> bool:
    deleted = state.deleted_topics_ms
    cutoff = now_ms - TOPIC_DELETED_LABEL_MS
    for gone in [n for n, at in deleted.items() if at < cutoff]:
        del deleted[gone]
    return name in deleted


def _recheck(
    state: CoreState,
    group_ids: Iterable[str],
    topics: tuple[str, ...],
    cause: RebalanceCause,
    now_ms: int,
    fx: Effects,
) -> None:
    groups = state.groups
    cache = state.topic_hashes
    for gid in sorted(group_ids):  # sorted: the same Effects whatever the set order
        group = groups.get(gid)
        if group is None or group.state not in _WATCHED:
            continue
        current = cache.group_hash(group.hashed_topics)
        if current == group.metadata_hash:
            continue
        if cause is RebalanceCause.TOPIC_DELETED:
            _deleted(state, group, current, topics, now_ms, fx)
        else:
            _metadata_changed(state, group, topics, cause, now_ms, fx)


def _metadata_changed(
    state: CoreState,
    group: ClassicGroup,
    topics: tuple[str, ...],
    cause: RebalanceCause,
    now_ms: int,
    fx: Effects,
) -> None:
    state.topic_hashes.rebalances += 1
    fx.events.append(GroupMetadataHashChanged(group.group_id, topics, now_ms, cause))
    prepare_rebalance(state, group, cause, RebalanceTrigger(topics=topics), now_ms, fx)


def _deleted(
    state: CoreState,
    group: ClassicGroup,
    current: int,
    topics: tuple[str, ...],
    now_ms: int,
    fx: Effects,
) -> None:
    """A topic the group reads was deleted: the members start the rebalance (module
    docstring). A Stable group's record takes the new hash in; a CompletingRebalance group
    has no record of this generation yet, and its SyncGroup writes one with the hash it was
    formed with, so a restart before its members rejoin still rebalances it."""
    fx.events.append(
        GroupMetadataHashChanged(group.group_id, topics, now_ms, RebalanceCause.TOPIC_DELETED)
    )
    group.topic_deleted_ms = now_ms
    if group.state is GroupState.STABLE:
        group.metadata_hash = current
        fx.records.append(group_record(state, group, now_ms))


def delete_topic_offsets(state: CoreState, name: str) -> Effects:
    """Delete every group's committed offsets of topic `name` (its deletion became certain after
    `topic_changed(..., keep_offsets=True)`)."""
    fx = Effects()
    _delete_topic_offsets(state, name, fx)
    return fx


def offset_topics(state: CoreState) -> set[str]:
    """Every topic some group has a committed offset for."""
    offsets = state.offsets
    return {t for gid in offsets.group_ids() for t, parts in offsets.topics(gid).items() if parts}


def _delete_topic_offsets(state: CoreState, name: str, fx: Effects) -> None:
    offsets = state.offsets
    for gid in offsets.group_ids():
        partitions = offsets.topics(gid).get(name)
        if not partitions:
            continue
        deleted = list(partitions)  # (`partitions` is the live map: it empties as we delete)
        for partition in deleted:
            offsets.delete(gid, name, partition)
            fx.records.append(Record(OffsetCommitKey(gid, name, partition), None))
        fx.events.append(OffsetsDeleted(gid, len(deleted)))


# -- loading -------------------------------------------------------------------------------------


def replay_topic(state: CoreState, key: TopicKey, value: TopicValue | None) -> None:
    """Apply one durable topic record (called by core.loading.replay)."""
    state.loading = True
    state.topic_records.add(key.name)
    if value is None:
        state.topics.remove(key.name)
    else:
        state.topics.put(topic_from_record(key.name, value))


def topics_loaded(state: CoreState, now_ms: int) -> Effects:
    """After `finish_loading`: index every group and compare its stored metadata hash."""
    fx = Effects()
    cache = state.topic_hashes
    for group in list(state.groups.values()):
        stored = group.metadata_hash
        cache.track_generation(group)
        if stored in (0, group.metadata_hash):
            continue  # unchanged, or unknown (adopted: KIP-1101's upgrade rule)
        group.metadata_hash = stored  # the generation's, until the next one is formed
        if group.state in _WATCHED:
            topics = tuple(sorted(group.hashed_topics))
            _metadata_changed(state, group, topics, RebalanceCause.METADATA_CHANGED, now_ms, fx)
    return fx


def declare_topics(state: CoreState, declared: Iterable[TopicInfo], now_ms: int) -> Effects:
    """Reconcile `--topic` declarations with the loaded catalog: a declared topic the log has
    never seen is persisted as declared; one the log deleted is created again; one the log
    has with fewer partitions grows to the declared count; otherwise the log wins (an admin
    may have grown it; partitions never shrink)."""
    fx = Effects()
    seen = state.topic_records
    topics = state.topics
    for d in declared:
        current = topics.get(d.name)
        if d.name not in seen:
            info = d if current is None else current
            topics.put(info)
            seen.add(d.name)
            fx.records.append(topic_record(d.name, info))
            if current is None:
                _announce(state, d.name, now_ms, fx)
        elif current is None:
            _merge(fx, topic_changed(state, d.name, d, now_ms))
        elif current.partitions < d.partitions:
            grown = current.with_partitions(d.partitions)
            _merge(fx, topic_changed(state, d.name, grown, now_ms))
    return fx


def _announce(state: CoreState, name: str, now_ms: int, fx: Effects) -> None:
    state.topic_hashes.invalidate(name)
    if not state.loading:
        cause = RebalanceCause.TOPIC_CREATED
        _recheck(state, state.topic_hashes.readers(name), (name,), cause, now_ms, fx)


def _merge(into: Effects, fx: Effects) -> None:
    into.replies.extend(fx.replies)
    into.records.extend(fx.records)
    into.events.extend(fx.events)
