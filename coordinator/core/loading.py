"""Loading (docs/protocol.md §12.3): rebuild the core's state from its durable records.

`replay(state, record)` applies one record and sets `state.loading`; `loading_partitions` is the
batch loading fast path's way in for offset values (record_batch.BatchReplayer), with the same
effect as replaying them; `finish_loading` clears `loading`, starts every loaded member's session
timer and the retention timer, and sends a group over group.max.size into a rebalance (Kafka's
onLoaded). A group is rebuilt as Kafka's ClassicGroup.fromRecord does: Stable with its members,
or Empty.

A sidecar fleet (coordinator.sidecar.fleet) moves state partitions between members while the core
serves: `load_groups` replays one partition's records into a serving core and starts only those
groups (Kafka's coordinator loads one __consumer_offsets partition the same way), and
`unload_groups` drops the groups of a partition this member no longer owns, answering their
parked JoinGroup/SyncGroup with NOT_COORDINATOR so their clients look the coordinator up again
(Kafka's onResignation). KIP-848 consumer groups (issue 23) load and unload with their partition
the same way: their records replay into `state.consumer`, their members get fresh session
timeouts, and an unloaded group's members are forgotten (their next heartbeat, routed to the new
owner, finds the group there with its epochs).
"""

from __future__ import annotations

from coordinator.core import txn_offsets
from coordinator.core.consumer.records import RECORD_TYPES as CONSUMER_KEY_TYPES
from coordinator.core.consumer.records import ConsumerGroupRecord
from coordinator.core.effects import Effects
from coordinator.core.events import RebalanceCause
from coordinator.core.expiry import arm_retention
from coordinator.core.group import ClassicGroup, GroupState, Member
from coordinator.core.messages import (
    ErrorCode,
    JoinGroupResult,
    Protocol,
    SyncGroupResult,
)
from coordinator.core.rebalance import prepare_rebalance
from coordinator.core.records import (
    AclKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    ScramCredentialKey,
    TopicKey,
    TopicValue,
    TxnOffsetKey,
    TxnOffsetValue,
)
from coordinator.core.share.group_configs import GroupConfigKey, GroupConfigValue
from coordinator.core.share.messages import ShareRecord
from coordinator.core.share.records import RECORD_TYPES as SHARE_KEY_TYPES
from coordinator.core.share.state_records import SharePartitionStateKey, SharePartitionStateValue
from coordinator.core.state import CoreState
from coordinator.core.topic_watch import replay_topic

SECURITY_KEYS = (AclKey, ScramCredentialKey)


def replay(state: CoreState, record: Record) -> None:
    """Apply one durable record. Sets `loading` until `finish_loading`."""
    state.loading = True
    key = record.key
    if isinstance(key, TopicKey):  # coordinator.core.topic_watch
        assert record.value is None or isinstance(record.value, TopicValue)
        replay_topic(state, key, record.value)
        return
    if isinstance(key, SECURITY_KEYS):  # coordinator.core.security
        state.security.apply(record)
        return
    if isinstance(key, TxnOffsetKey):  # coordinator.core.txn_offsets
        assert record.value is None or isinstance(record.value, TxnOffsetValue)
        txn_offsets.replay(state, key, record.value)
        return
    groups = state.groups
    if type(key) in CONSUMER_KEY_TYPES:  # KIP-848 (issue 23): coordinator.core.consumer
        state.consumer.replay(ConsumerGroupRecord(key, record.value))  # type: ignore[arg-type]
        # The id is a consumer group now: an empty classic group its offsets made before (a
        # compacted log may no longer hold the tombstone that deleted it) gives way.
        classic = groups.get(key.group_id)
        if classic is not None and not classic.members:
            del groups[key.group_id]
        return
    if type(key) in SHARE_KEY_TYPES:  # KIP-932: coordinator.core.share
        state.share.replay(ShareRecord(key, record.value))  # type: ignore[arg-type]
        return
    if isinstance(key, SharePartitionStateKey):  # KIP-932: a share partition's state
        assert record.value is None or isinstance(record.value, SharePartitionStateValue)
        state.share.replay_partition(key, record.value)
        return
    if isinstance(key, GroupConfigKey):  # a group's configs (core.share.group_configs)
        assert record.value is None or isinstance(record.value, GroupConfigValue)
        state.share.replay_group_config(key, record.value)
        return
    if isinstance(key, OffsetCommitKey):
        if record.value is None:
            state.offsets.delete(key.group_id, key.topic, key.partition)
            return
        assert isinstance(record.value, OffsetCommitValue)
        if key.group_id not in groups and key.group_id not in state.consumer.groups:
            groups[key.group_id] = ClassicGroup(key.group_id, None)
        state.offsets.put(key.group_id, key.topic, key.partition, record.value)
        return
    if record.value is None:
        groups.pop(key.group_id, None)
        return
    assert isinstance(record.value, GroupMetadataValue)
    groups[key.group_id] = group_from_record(key.group_id, record.value)


def loading_partitions(state: CoreState, group_id: str, topic: str) -> dict[int, OffsetCommitValue]:
    """The table that replayed offsets of (group_id, topic) go into, the group created as
    `replay` does. The caller puts a value in it at once and stops using it after any other
    kind of record."""
    state.loading = True
    if group_id not in state.groups and group_id not in state.consumer.groups:
        state.groups[group_id] = ClassicGroup(group_id, None)
    return state.offsets.table(group_id, topic)


def finish_loading(state: CoreState, now_ms: int) -> None:
    """Start every loaded member's session timer; send oversized groups into a rebalance."""
    state.loading = False
    state.consumer.finish_loading(now_ms)
    state.share.finish_loading(now_ms)
    schedule = state.timers.schedule_session
    for group in state.groups.values():
        for member in group.members.values():
            schedule(group, member, member.session_timeout_ms, now_ms)
        if len(group.members) > state.config.max_group_size:
            # Kafka's onLoaded; nothing is parked yet, so the Effects hold only an event.
            prepare_rebalance(state, group, RebalanceCause.GROUP_MAX_SIZE, None, now_ms, Effects())
    if state.timers.retention_seq == 0:
        arm_retention(state, now_ms)


def load_groups(state: CoreState, records: list[Record], now_ms: int) -> Effects:
    """Replay one partition's records into a core that is serving; start their groups as
    `finish_loading` does. The caller unloaded these groups first (`unload_groups`)."""
    was_loading = state.loading
    loaded: dict[str, None] = {}  # in the partition's order: the timers are armed in that order
    for record in records:
        key = record.key
        if isinstance(key, TopicKey | AclKey | ScramCredentialKey):
            # A fleet learns topics from the upstream, not from the state partitions; security
            # records live on the fleet's security topic (coordinator.sidecar.fleet_security).
            continue
        replay(state, record)
        # The value is never read (an ordered set): another value is an equivalent mutant.
        loaded[key.group_id] = None  # pragma: no mutate
    state.loading = was_loading
    state.consumer.finish_loading(now_ms, loaded)  # KIP-848 groups: their timers (issue 23)
    state.share.finish_loading(now_ms, [g for g in loaded if g in state.share.groups])
    fx = Effects()
    schedule = state.timers.schedule_session
    for group_id in loaded:
        group = state.groups.get(group_id)
        if group is None:
            continue  # deleted by a later record of the same partition
        for member in group.members.values():
            schedule(group, member, member.session_timeout_ms, now_ms)
        if len(group.members) > state.config.max_group_size:
            prepare_rebalance(state, group, RebalanceCause.GROUP_MAX_SIZE, None, now_ms, fx)
    if state.timers.retention_seq == 0 and not state.loading:
        arm_retention(state, now_ms)
    return fx


def unload_groups(state: CoreState, group_ids: list[str]) -> Effects:
    """Forget these groups and their offsets (their partition moved to another member); parked
    requests get NOT_COORDINATOR. Their timer entries die with them (TimerHeap.is_live looks the
    group up). No record is written: the state stays on the partition for its new owner."""
    fx = Effects()
    for group_id in group_ids:
        state.consumer.unload_group(group_id)  # KIP-848 groups (issue 23)
        state.share.unload_group(group_id)  # KIP-932 share groups
        group = state.groups.pop(group_id, None)
        state.offsets.drop_group(group_id)
        state.txn_pending.drop_group(group_id)
        if group is None:
            continue
        state.topic_hashes.untrack(group)
        for member in group.members.values():  # the group is gone: nothing reads them again
            if member.join_reply_to is not None:
                fx.replies.append(
                    (member.join_reply_to, JoinGroupResult(ErrorCode.not_coordinator))
                )
            if member.sync_reply_to is not None:
                fx.replies.append(
                    (member.sync_reply_to, SyncGroupResult(ErrorCode.not_coordinator))
                )
    return fx


def group_from_record(group_id: str, value: GroupMetadataValue) -> ClassicGroup:
    """ClassicGroup.fromRecord: Stable with members, else Empty; one protocol per member."""
    ts = value.current_state_timestamp_ms
    group = ClassicGroup(group_id, None if ts < 0 else ts)
    # Equivalent mutants on the next line and on `protocol_type=` below: `add` sets the group's
    # protocol type from the first member's (the only reader of a member's protocol_type), and
    # it is set again after the members.
    group.protocol_type = value.protocol_type or None  # pragma: no mutate
    group.generation_id = value.generation_id
    group.protocol_name = value.protocol_name
    for mm in value.members:
        rebalance = (
            mm.session_timeout_ms if mm.rebalance_timeout_ms == -1 else mm.rebalance_timeout_ms
        )
        # The `or ""` is an equivalent mutant: a group with members always has a protocol.
        protocols = (Protocol(value.protocol_name or "", mm.subscription),)  # pragma: no mutate
        group.add(
            Member(
                mm.member_id,
                mm.group_instance_id,
                client_id=mm.client_id,
                client_host=mm.client_host,
                rebalance_timeout_ms=rebalance,
                session_timeout_ms=mm.session_timeout_ms,
                protocol_type=value.protocol_type,  # pragma: no mutate
                protocols=protocols,
                assignment=mm.assignment,
            )
        )
    group.protocol_type = value.protocol_type or None
    if value.members:
        group.state = GroupState.STABLE
        if value.leader is not None and value.leader in group.members:
            group.leader_id = value.leader
    group.subscribed_topics = group.compute_subscribed_topics()
    group.metadata_hash = value.metadata_hash  # compared in topic_watch.topics_loaded
    return group
