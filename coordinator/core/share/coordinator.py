"""The share-group coordinator (KIP-932): ShareGroupHeartbeat (API 76) and ShareGroupDescribe
(API 77) as Kafka 4.4's GroupMetadataManager answers them, and the share partitions' home.

`heartbeat(request, now_ms)` -> ShareResult(response, records, partition_updates):
1. the request checks of KafkaApis and GroupCoordinatorService (a member id empty or longer
   than 36 characters, an empty group id or rack id, epoch 0 without topics, epoch < -1:
   INVALID_REQUEST); epoch -1 leaves (GROUP_ID_NOT_FOUND,
   UNKNOWN_MEMBER_ID, else the member is removed and the group epoch bumped);
2. the group (created by epoch 0 only, else GROUP_ID_NOT_FOUND), its size (GROUP_MAX_SIZE_REACHED
   for a new member of a full group), the member (UNKNOWN_MEMBER_ID for a non-zero epoch it does
   not know) and its epoch (FENCED_MEMBER_EPOCH unless equal to its epoch or previous epoch);
3. the member's metadata record when it changed; the group epoch is bumped by a subscription
   change or a new KIP-1101 metadata hash (recomputed then, and after any subscribed topic
   changed: partitions added reach the members);
4. a new target assignment (the `simple` assignor) whenever the group epoch is ahead of the
   assignment epoch; 5. the member takes its target at once (share members never revoke).
The assignment is sent on a join (epoch 0), a full request (topic names set) or when it changed.
`expire(now_ms)` fences members silent for the session timeout (group.share.session.timeout.ms).

Share partitions: `share_partition(group_id, topic_id, partition)` gets or creates the
`SharePartition` of that key with the group's `SharePartitionConfig` (`partition_config`, which
a group config may override via `set_partition_config`); the ShareFetch/ShareAcknowledge shell
owns their durability. A member leaving or fenced releases its acquired records in every
partition of its group: the `ShareUpdate`s come back in `partition_updates` for the shell to
persist.

Invariants: every change to a group is a record, replayed at once by `replay` (the live groups
are the replay of the records returned so far); a refused request emits nothing.

Where we differ from Kafka 4.4 on purpose:
- No share-state initialization step (ShareGroupStatePartitionMetadata, InitializeShareGroupState):
  groupcoord keeps the share state itself, so a subscribed partition is assigned at once, where
  Kafka first assigns nothing and adds partitions once the share coordinator initialized them.
- The target is computed on the heartbeat that bumps the epoch (no group.share.assignment.
  interval.ms pacing, KIP-1263).
Pure: no I/O, no clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import replace

from coordinator.core.messages import ErrorCode
from coordinator.core.share import assignor, group_configs
from coordinator.core.share.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    PartitionMap,
    ShareGroup,
    ShareGroupMember,
    replay,
    to_topic_partitions,
)
from coordinator.core.share.group_configs import GroupConfigKey, GroupConfigValue
from coordinator.core.share.messages import (
    DescribedShareGroup,
    DescribedShareMember,
    ShareGroupConfig,
    ShareGroupDescribe,
    ShareGroupDescribeResult,
    ShareGroupHeartbeat,
    ShareHeartbeatResponse,
    ShareRecord,
    ShareResult,
)
from coordinator.core.share.partition import SharePartition, SharePartitionConfig, ShareUpdate
from coordinator.core.share.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)
from coordinator.core.share.state_records import SharePartitionStateKey, SharePartitionStateValue
from coordinator.core.topichash import TopicHashCache
from coordinator.core.topics import TopicCatalog

__all__ = ["PartitionKey", "ShareGroupCoordinator"]

E = ErrorCode
PartitionKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)


class ShareGroupCoordinator:
    def __init__(self, config: ShareGroupConfig, topics: TopicCatalog) -> None:
        self.config = config
        self.topics = topics
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[PartitionKey, SharePartition] = {}
        self._partition_configs: dict[str, SharePartitionConfig] = {}
        # Group configs (coordinator.core.share.group_configs), per group id: what is set.
        self.group_configs: dict[str, dict[str, str]] = {}
        self._deadlines: dict[tuple[str, str], int] = {}  # session timeouts
        self._stale: set[str] = set()  # groups whose subscribed topics changed
        self._hashes = TopicHashCache(topics, config.topic_hash)

    # -- ShareGroupHeartbeat -----------------------------------------------------------------------

    def heartbeat(self, req: ShareGroupHeartbeat, now_ms: int) -> ShareResult:
        if not req.member_id or len(req.member_id) > 36:
            # KafkaApis.isMemberIdValid: its error response carries no message (Kafka 4.4).
            return ShareResult(ShareHeartbeatResponse(E.invalid_request))
        refused = _request_error(req)
        if refused is not None:
            return ShareResult(ShareHeartbeatResponse(E.invalid_request, refused))
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            return self._leave(req)
        gid, mid = req.group_id, req.member_id
        group = self.groups.get(gid)
        if group is None and req.member_epoch != 0:  # getOrMaybeCreateShareGroup's words
            return _refuse(E.group_id_not_found, f"Share group {gid} not found.")
        group = group or ShareGroup(gid)
        member = group.members.get(mid)
        if member is None and len(group.members) >= self.config.max_size:
            return _refuse(
                E.group_max_size_reached,
                "The share group has reached its maximum capacity of "
                f"{self.config.max_size} members.",
            )
        if member is None:
            if req.member_epoch != 0:
                return _refuse(E.unknown_member_id, f"Member {mid} is not a member of group {gid}.")
            member = ShareGroupMember(mid)
        elif req.member_epoch not in (0, member.member_epoch, member.previous_member_epoch):
            return _refuse(E.fenced_member_epoch, _fenced_message(req.member_epoch, member))
        records: list[ShareRecord] = []
        updated = replace(
            member,
            rack_id=member.rack_id if req.rack_id is None else req.rack_id,
            subscribed_topic_names=member.subscribed_topic_names
            if req.subscribed_topic_names is None
            else tuple(sorted(set(req.subscribed_topic_names))),
            client_id=req.client_id,
            client_host=req.client_host,
        )
        bump = False
        if updated != member or mid not in group.members:
            records.append(_member_record(gid, updated))
            bump = updated.subscribed_topic_names != member.subscribed_topic_names
        members = {**group.members, mid: updated}
        epoch, metadata_hash = group.group_epoch, group.metadata_hash
        if bump or gid in self._stale:
            self._stale.discard(gid)
            metadata_hash = self._hashes.group_hash(
                {t for m in members.values() for t in m.subscribed_topic_names}
            )
            bump |= metadata_hash != group.metadata_hash
            if bump:
                epoch += 1
                records.append(
                    ShareRecord(
                        ShareGroupMetadataKey(gid), ShareGroupMetadataValue(epoch, metadata_hash)
                    )
                )
        targets = dict(group.targets)
        assignment_epoch = group.assignment_epoch
        if epoch > assignment_epoch:
            assignment_epoch = epoch
            records += self._new_target(gid, members, targets, epoch)
        target = targets.get(mid, updated.assigned)
        if bump or updated.member_epoch != assignment_epoch:
            reconciled = replace(
                updated,
                member_epoch=assignment_epoch,
                previous_member_epoch=updated.member_epoch,
                assigned=target,
            )
            if reconciled != updated:
                records.append(_assignment_record(gid, reconciled))
            updated = reconciled
        self._apply(records)
        self._deadlines[(gid, mid)] = now_ms + self._group_ms(gid, "share.session.timeout.ms")
        send = (
            req.member_epoch == 0
            or req.subscribed_topic_names is not None
            or updated.assigned != member.assigned
        )
        return ShareResult(
            ShareHeartbeatResponse(
                E.none,
                member_id=mid,
                member_epoch=updated.member_epoch,
                heartbeat_interval_ms=self._group_ms(gid, "share.heartbeat.interval.ms"),
                assignment=to_topic_partitions(updated.assigned) if send else None,
            ),
            tuple(records),
        )

    def _new_target(
        self,
        gid: str,
        members: dict[str, ShareGroupMember],
        targets: dict[str, PartitionMap],
        epoch: int,
    ) -> list[ShareRecord]:
        subscriptions: dict[str, frozenset[uuid.UUID]] = {}
        counts: dict[uuid.UUID, int] = {}
        for m in members.values():
            ids = []
            for name in m.subscribed_topic_names:
                info = self.topics.get(name)
                if info is not None:
                    ids.append(info.topic_id)
                    counts[info.topic_id] = info.partitions
            subscriptions[m.member_id] = frozenset(ids)
        computed = assignor.assign(subscriptions, counts, targets)
        records = []
        for mid, partitions in sorted(computed.items()):
            if mid not in targets or dict(targets[mid]) != dict(partitions):
                targets[mid] = partitions
                records.append(
                    ShareRecord(
                        ShareGroupTargetAssignmentMemberKey(gid, mid),
                        ShareGroupTargetAssignmentMemberValue(to_topic_partitions(partitions)),
                    )
                )
        records.append(
            ShareRecord(
                ShareGroupTargetAssignmentMetadataKey(gid),
                ShareGroupTargetAssignmentMetadataValue(epoch),
            )
        )
        return records

    # -- leaving and fencing -----------------------------------------------------------------------

    def _leave(self, req: ShareGroupHeartbeat) -> ShareResult:
        group = self.groups.get(req.group_id)
        if group is None:
            return _refuse(E.group_id_not_found, f"Group {req.group_id} not found.")
        if req.member_id not in group.members:
            return _refuse(
                E.unknown_member_id,
                f"Member {req.member_id} is not a member of group {req.group_id}.",
            )
        records, updates = self._fence(group, req.member_id)
        response = ShareHeartbeatResponse(
            E.none, member_id=req.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH
        )
        return ShareResult(response, records, updates)

    def _fence(
        self, group: ShareGroup, mid: str
    ) -> tuple[tuple[ShareRecord, ...], tuple[tuple[PartitionKey, ShareUpdate], ...]]:
        """Kafka's shareGroupFenceMember: the member's three tombstones and a group epoch bump
        with the hash of the remaining members' topics."""
        gid = group.group_id
        remaining = [m for m in group.members.values() if m.member_id != mid]
        metadata_hash = self._hashes.group_hash(
            {t for m in remaining for t in m.subscribed_topic_names}
        )
        epoch = group.group_epoch + 1
        records = [
            ShareRecord(ShareGroupCurrentMemberAssignmentKey(gid, mid), None),
            ShareRecord(ShareGroupTargetAssignmentMemberKey(gid, mid), None),
            ShareRecord(ShareGroupMemberMetadataKey(gid, mid), None),
            ShareRecord(ShareGroupMetadataKey(gid), ShareGroupMetadataValue(epoch, metadata_hash)),
        ]
        if not remaining:  # the last member: the assignment epoch catches up (Kafka does too)
            records.append(
                ShareRecord(
                    ShareGroupTargetAssignmentMetadataKey(gid),
                    ShareGroupTargetAssignmentMetadataValue(epoch),
                )
            )
        self._apply(records)
        self._deadlines.pop((gid, mid), None)
        updates = []
        for key, part in sorted(self.partitions.items(), key=lambda kv: (kv[0][1].bytes, kv[0][2])):
            if key[0] == gid:
                update = part.release_member(mid)
                if update is not None:
                    updates.append((key, update))
        return tuple(records), tuple(updates)

    def expire(self, now_ms: int) -> list[ShareResult]:
        """Fence every member whose session timed out (one result per member, no response)."""
        out = []
        for (gid, mid), deadline in sorted(self._deadlines.items(), key=lambda kv: kv[1]):
            group = self.groups.get(gid)
            if deadline > now_ms:
                continue
            if group is None or mid not in group.members:
                self._deadlines.pop((gid, mid), None)
                continue
            records, updates = self._fence(group, mid)
            out.append(ShareResult(ShareHeartbeatResponse(E.none, member_id=mid), records, updates))
        return out

    def next_deadline_ms(self) -> int | None:
        return min(self._deadlines.values(), default=None)

    # -- ShareGroupDescribe ------------------------------------------------------------------------

    def describe(
        self, req: ShareGroupDescribe, other_type: Iterable[str] = ()
    ) -> ShareGroupDescribeResult:
        """`other_type`: ids of classic/consumer groups (Kafka: "Group X is not a share group.")."""
        foreign = set(other_type)
        out = []
        for gid in req.group_ids:
            group = self.groups.get(gid)
            if group is None:
                message = (
                    f"Group {gid} {'is not a share group' if gid in foreign else 'not found'}."
                )
                out.append(DescribedShareGroup(gid, E.group_id_not_found, message))
                continue
            members = tuple(self._describe_member(m) for m in group.members.values())
            out.append(
                DescribedShareGroup(
                    gid,
                    group_state=group.state.value,
                    group_epoch=group.group_epoch,
                    assignment_epoch=group.assignment_epoch,
                    assignor_name=assignor.NAME,
                    members=members,
                )
            )
        return ShareGroupDescribeResult(tuple(out))

    def _describe_member(self, m: ShareGroupMember) -> DescribedShareMember:
        assignment = []
        for tp in to_topic_partitions(m.assigned):
            name = self.topics.name_of(tp.topic_id)
            if name is not None:  # Kafka leaves out topics missing from the metadata image
                assignment.append((tp.topic_id, name, tp.partitions))
        return DescribedShareMember(
            m.member_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
            m.subscribed_topic_names, tuple(assignment),
        )  # fmt: skip

    # -- share partitions --------------------------------------------------------------------------

    def partition_config(self, group_id: str) -> SharePartitionConfig:
        return self._partition_configs.get(group_id, self.config.partition)

    def set_partition_config(self, group_id: str, config: SharePartitionConfig | None) -> None:
        """A group config (share.record.lock.duration.ms, ...) changed; None: the defaults.
        Existing partitions take it at once."""
        if config is None:
            self._partition_configs.pop(group_id, None)
        else:
            self._partition_configs[group_id] = config
        for key, part in self.partitions.items():
            if key[0] == group_id:
                part.config = self.partition_config(group_id)

    def _group_ms(self, group_id: str, name: str) -> int:
        """The share session timeout or heartbeat interval: the group's, else the broker's."""
        value = self.group_configs.get(group_id, {}).get(name)
        if value is not None:
            return int(value)
        if name == "share.session.timeout.ms":
            return self.config.session_timeout_ms
        return self.config.heartbeat_interval_ms

    def auto_offset_reset(self, group_id: str) -> str:
        """The group's share.auto.offset.reset (Kafka's default: latest)."""
        return self.group_configs.get(group_id, {}).get("share.auto.offset.reset", "latest")

    def read_committed(self, group_id: str) -> bool:
        """The group's share.isolation.level is read_committed (Kafka's default: uncommitted)."""
        level = self.group_configs.get(group_id, {}).get("share.isolation.level", "")
        return level.strip() == "read_committed"  # Kafka trims a STRING config's value

    def replay_group_config(self, key: GroupConfigKey, value: GroupConfigValue | None) -> None:
        """A group's config record: what it sets now (None: nothing). Live share partitions take
        the new lock duration and delivery count limit at once (for new acquisitions)."""
        configs = {} if value is None else dict(value.configs)
        if configs:
            self.group_configs[key.group_id] = configs
        else:
            self.group_configs.pop(key.group_id, None)
        self.set_partition_config(
            key.group_id, group_configs.partition_config(self.config.partition, configs)
        )

    def share_partition(
        self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int = 0
    ) -> SharePartition:
        key = (group_id, topic_id, partition)
        part = self.partitions.get(key)
        if part is None:
            part = self.partitions[key] = SharePartition(
                self.partition_config(group_id), start_offset
            )
        return part

    # -- records, loading, topics ------------------------------------------------------------------

    def _apply(self, records: Iterable[ShareRecord]) -> None:
        for record in records:
            self.replay(record)

    def replay(self, record: ShareRecord) -> None:
        replay(self.groups, record.key, record.value)

    def replay_partition(
        self, key: SharePartitionStateKey, value: SharePartitionStateValue | None
    ) -> None:
        """A share partition's state record (coordinator.core.share.state_records): the
        partition as it was persisted, or gone (a tombstone)."""
        k = (key.group_id, key.topic_id, key.partition)
        if value is None:
            self.partitions.pop(k, None)
        else:
            config = self.partition_config(key.group_id)
            self.partitions[k] = SharePartition.from_snapshot(value.snapshot, config)

    def finish_loading(self, now_ms: int, group_ids: Iterable[str] | None = None) -> None:
        """Loaded members get a fresh session timeout (Kafka schedules one per member on load)."""
        for gid in self.groups if group_ids is None else group_ids:
            group = self.groups.get(gid)
            for mid in group.members if group else ():
                self._deadlines[(gid, mid)] = now_ms + self._group_ms(
                    gid, "share.session.timeout.ms"
                )
            self._stale.add(gid)

    def unload_group(self, group_id: str) -> None:
        self.groups.pop(group_id, None)
        self._deadlines = {k: v for k, v in self._deadlines.items() if k[0] != group_id}
        self.partitions = {k: v for k, v in self.partitions.items() if k[0] != group_id}
        self.group_configs.pop(group_id, None)  # its record comes back with the group's
        self._partition_configs.pop(group_id, None)

    def topic_changed(self, name: str) -> None:
        """A topic was created, grew or was deleted: its readers recompute their hash."""
        self._hashes.invalidate(name)
        for gid, group in self.groups.items():
            if any(name in m.subscribed_topic_names for m in group.members.values()):
                self._stale.add(gid)


def _request_error(req: ShareGroupHeartbeat) -> str | None:
    if not req.group_id:
        return "GroupId can't be empty."
    if req.rack_id == "":
        return "RackId can't be empty."
    if req.member_epoch == 0 and not req.subscribed_topic_names:
        return "SubscribedTopicNames must be set in first request."
    if req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        return "MemberEpoch is invalid."
    return None


def _refuse(error: ErrorCode, message: str) -> ShareResult:
    return ShareResult(ShareHeartbeatResponse(error, message))


def _fenced_message(epoch: int, member: ShareGroupMember) -> str:
    if epoch > member.member_epoch:
        return (
            f"The share group member has a greater member epoch ({epoch}) than the one known by "
            f"the group coordinator ({member.member_epoch}). The member must abandon all its "
            "partitions and rejoin."
        )
    return (
        f"The share group member has a smaller member epoch ({epoch}) than the one known by the "
        f"group coordinator ({member.member_epoch}), and it does not match the previous member "
        f"epoch ({member.previous_member_epoch}). The member must abandon all its partitions and "
        "rejoin."
    )


def _member_record(gid: str, m: ShareGroupMember) -> ShareRecord:
    return ShareRecord(
        ShareGroupMemberMetadataKey(gid, m.member_id),
        ShareGroupMemberMetadataValue(
            m.rack_id, m.client_id, m.client_host, m.subscribed_topic_names
        ),
    )


def _assignment_record(gid: str, m: ShareGroupMember) -> ShareRecord:
    return ShareRecord(
        ShareGroupCurrentMemberAssignmentKey(gid, m.member_id),
        ShareGroupCurrentMemberAssignmentValue(
            m.member_epoch, m.previous_member_epoch, 0, to_topic_partitions(m.assigned)
        ),
    )
