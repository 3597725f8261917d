"""The classic group APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) for a group id that is a
non-empty KIP-848 consumer group: its classic members (issue 23 item 6). The decisions are
coordinator.core.consumer.classic's; this turns them into Effects as core.handlers.consumer does
for ConsumerGroupHeartbeat (records, the consumer events as the core's, the reply).

The classic handlers call these only after their own first checks (empty group id, session
timeout bounds, loading), and only when the id is not a classic group (one namespace of ids).
"""

from __future__ import annotations

from coordinator.core.consumer import classic
from coordinator.core.effects import Effects
from coordinator.core.handlers import migration
from coordinator.core.handlers.consumer import _TRANSLATED, _event
from coordinator.core.messages import (
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    LeaveGroup,
    SyncGroup,
)
from coordinator.core.records import Record
from coordinator.core.state import CoreState

__all__ = ["heartbeat", "join", "leave", "sync"]


def _apply(result: classic.ClassicResult, reply_to: int, now_ms: int, fx: Effects) -> None:
    fx.records.extend(Record(r.key, r.value) for r in result.records)
    fx.events.extend(_event(e, now_ms) for e in result.events if type(e) in _TRANSLATED)
    fx.replies.append((reply_to, result.response))


def join(state: CoreState, reply_to: int, cmd: JoinGroup, now_ms: int, fx: Effects) -> None:
    group = state.consumer.groups[cmd.group_id]
    existing = group.static_member(cmd.group_instance_id)
    # A consumer-protocol static member this join may replace (the rolling downgrade).
    replacing = existing.member_id if existing is not None and existing.classic is None else None
    _apply(classic.join(state.consumer, cmd, now_ms), reply_to, now_ms, fx)
    if replacing is not None and replacing not in group.members:
        migration.maybe_downgrade(state, cmd.group_id, now_ms, fx, replaced=True)


def sync(state: CoreState, reply_to: int, cmd: SyncGroup, now_ms: int, fx: Effects) -> None:
    fx.replies.append((reply_to, classic.sync(state.consumer, cmd, now_ms)))


def heartbeat(state: CoreState, cmd: Heartbeat, now_ms: int) -> HeartbeatResult:
    return classic.heartbeat(state.consumer, cmd, now_ms)


def leave(state: CoreState, reply_to: int, cmd: LeaveGroup, now_ms: int, fx: Effects) -> None:
    _apply(classic.leave(state.consumer, cmd, now_ms), reply_to, now_ms, fx)
