"""Topic changes as the core sees them: the catalog, its records, and KIP-1101 for classic groups.

`TopicWatch` sits between `core.joins.GroupMachine` and `core.coordinator.GroupCoordinator`
and adds:
- `topic_changed(name, info | None, now_ms) -> Effects`: the one entry point for "topic X now
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

from coordinator.core.effects import CoordinatorConfig, Effects, MemberIdFactory
from coordinator.core.events import GroupMetadataHashChanged, OffsetsDeleted, RebalanceCause
from coordinator.core.group import ClassicGroup, GroupState
from coordinator.core.joins import TOPIC_DELETED_LABEL_MS, GroupMachine
from coordinator.core.offsets import OffsetStore
from coordinator.core.records import OffsetCommitKey, Record, TopicKey, TopicValue
from coordinator.core.topics import TopicCatalog, TopicInfo

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


class TopicWatch(GroupMachine):
    _offsets: OffsetStore  # GroupCoordinator's

    def __init__(
        self,
        config: CoordinatorConfig,
        topics: TopicCatalog,
        new_member_id: MemberIdFactory,
        epoch_offset_ms: int = 0,
    ) -> None:
        super().__init__(config, topics, new_member_id, epoch_offset_ms)
        self._topic_records: set[str] = set()  # names with a topic record (value or tombstone)
        # Names deleted within TOPIC_DELETED_LABEL_MS: one that comes back was re-created. Not
        # persisted (only a label depends on it); pruned on every deletion.
        self._deleted_ms: dict[str, int] = {}

    def topic_changed(self, name: str, info: TopicInfo | None, now_ms: int) -> Effects:
        """Topic `name` now looks like `info` (None: it was deleted). No-op when nothing changed."""
        fx = Effects()
        current = self.topics.get(name)
        if info == current:
            return fx
        if info is not None and info.name != name:
            raise ValueError(f"topic_changed({name!r}) with the info of {info.name!r}")
        self._topic_records.add(name)
        cause = change_cause(current, info, self._recently_deleted(name, now_ms))
        if info is None:
            self.topics.remove(name)
            self._delete_topic_offsets(name, fx)
            self._deleted_ms[name] = now_ms
        else:
            self.topics.put(info)
            self._deleted_ms.pop(name, None)
        fx.records.append(topic_record(name, info))
        self.topic_hashes.invalidate(name)
        if not self.loading:
            self._recheck(self.topic_hashes.readers(name), (name,), cause, now_ms, fx)
        return fx

    def _recently_deleted(self, name: str, now_ms: int) -> bool:
        deleted = self._deleted_ms
        cutoff = now_ms - TOPIC_DELETED_LABEL_MS
        for gone in [n for n, at in deleted.items() if at < cutoff]:
            del deleted[gone]
        return name in deleted

    def _recheck(
        self,
        group_ids: Iterable[str],
        topics: tuple[str, ...],
        cause: RebalanceCause,
        now_ms: int,
        fx: Effects,
    ) -> None:
        groups = self._groups
        cache = self.topic_hashes
        for gid in sorted(group_ids):  # sorted: the same Effects whatever the set order
            group = groups.get(gid)
            if group is None or group.state not in _WATCHED:
                continue
            current = cache.group_hash(group.hashed_topics)
            if current == group.metadata_hash:
                continue
            if cause is RebalanceCause.TOPIC_DELETED:
                self._deleted(group, current, topics, now_ms, fx)
            else:
                self._metadata_changed(group, topics, cause, now_ms, fx)

    def _metadata_changed(
        self,
        group: ClassicGroup,
        topics: tuple[str, ...],
        cause: RebalanceCause,
        now_ms: int,
        fx: Effects,
    ) -> None:
        self.topic_hashes.rebalances += 1
        fx.events.append(GroupMetadataHashChanged(group.group_id, topics, now_ms, cause))
        self._prepare_rebalance(group, cause, None, now_ms, fx)

    def _deleted(
        self, group: ClassicGroup, current: int, topics: tuple[str, ...], now_ms: int, fx: Effects
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
            fx.records.append(self.group_record(group, now_ms))

    def _delete_topic_offsets(self, name: str, fx: Effects) -> None:
        offsets = self._offsets
        for gid in offsets.group_ids():
            partitions = offsets.topics(gid).get(name)
            if not partitions:
                continue
            for partition in list(partitions):
                offsets.delete(gid, name, partition)
                fx.records.append(Record(OffsetCommitKey(gid, name, partition), None))
            fx.events.append(OffsetsDeleted(gid, len(partitions)))

    # -- loading ---------------------------------------------------------------------------------

    def replay_topic(self, key: TopicKey, value: TopicValue | None) -> None:
        """Apply one durable topic record (called by `replay`)."""
        self.loading = True
        self._topic_records.add(key.name)
        if value is None:
            self.topics.remove(key.name)
        else:
            self.topics.put(topic_from_record(key.name, value))

    def topics_loaded(self, now_ms: int) -> Effects:
        """After `finish_loading`: index every group and compare its stored metadata hash."""
        fx = Effects()
        cache = self.topic_hashes
        for group in list(self._groups.values()):
            stored = group.metadata_hash
            cache.track_generation(group)
            if stored in (0, group.metadata_hash):
                continue  # unchanged, or unknown (adopted: KIP-1101's upgrade rule)
            group.metadata_hash = stored  # the generation's, until the next one is formed
            if group.state in _WATCHED:
                topics = tuple(sorted(group.hashed_topics))
                self._metadata_changed(group, topics, RebalanceCause.METADATA_CHANGED, now_ms, fx)
        return fx

    def declare_topics(self, declared: Iterable[TopicInfo], now_ms: int) -> Effects:
        """Reconcile `--topic` declarations with the loaded catalog: a declared topic the log has
        never seen is persisted as declared; one the log deleted is created again; one the log
        has with fewer partitions grows to the declared count; otherwise the log wins (an admin
        may have grown it; partitions never shrink)."""
        fx = Effects()
        seen = self._topic_records
        for d in declared:
            current = self.topics.get(d.name)
            if d.name not in seen:
                info = d if current is None else current
                self.topics.put(info)
                seen.add(d.name)
                fx.records.append(topic_record(d.name, info))
                if current is None:
                    self._merge(fx, self._announce(d.name, now_ms))
            elif current is None:
                self._merge(fx, self.topic_changed(d.name, d, now_ms))
            elif current.partitions < d.partitions:
                grown = current.with_partitions(d.partitions)
                self._merge(fx, self.topic_changed(d.name, grown, now_ms))
        return fx

    def _announce(self, name: str, now_ms: int) -> Effects:
        fx = Effects()
        self.topic_hashes.invalidate(name)
        if not self.loading:
            cause = RebalanceCause.TOPIC_CREATED
            self._recheck(self.topic_hashes.readers(name), (name,), cause, now_ms, fx)
        return fx

    @staticmethod
    def _merge(into: Effects, fx: Effects) -> None:
        into.replies.extend(fx.replies)
        into.records.extend(fx.records)
        into.events.extend(fx.events)
