"""Share sessions (KIP-932): which partitions a share consumer fetches, request after request.

A share consumer's ShareFetch carries ShareSessionEpoch: 0 opens a session (replacing the one the
member had), -1 closes it, any other value must equal the session's current epoch, which then
moves on by one (Integer.MAX_VALUE wraps to 1). An incremental request adds the partitions it
names and drops its ForgottenTopicsData; the session's partitions are what every request of the
session fetches. ShareAcknowledge uses the same epoch rules, except that it may not open a
session (epoch 0 is refused) and does not move the epoch on the final (-1) request.

Follows Apache Kafka's SharePartitionManager.newContext / ShareSessionCache:
- epoch -1 with partitions to fetch: INVALID_REQUEST; with no session: SHARE_SESSION_NOT_FOUND.
- epoch 0 with piggybacked acknowledgements: INVALID_REQUEST (nothing was delivered yet).
- epoch n without a session: SHARE_SESSION_NOT_FOUND; with another epoch:
  INVALID_SHARE_SESSION_EPOCH.
- a client connection closing ends the sessions last used on it (Kafka 4.1+, KAFKA-19015), and
  their members' acquired records go back at once instead of at their locks' expiry.
- a new session beyond `limit` sessions: SHARE_SESSION_LIMIT_REACHED (Kafka's
  group.share.max.share.sessions, 2000 by default); an idle session is evicted first.
A partition with MaxBytes 0 is not added (Kafka's shareFetchDataWithMaxBytes); ShareFetch v1+
has no per-partition MaxBytes, so every named partition is added.

Pure: no I/O, no clock (`now_ms` is passed in).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from kio.schema.errors import ErrorCode

INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
DEFAULT_LIMIT: Final = 2000  # Kafka's group.share.max.share.sessions
DEFAULT_IDLE_MS: Final = 120_000  # an idle session may be evicted to make room after this

TopicIdPartition = tuple[uuid.UUID, int]
SessionKey = tuple[str, str]  # (group_id, member_id)


def next_epoch(epoch: int) -> int:
    """Kafka's ShareRequestMetadata.nextEpoch: -1 stays, MAX_VALUE wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 2**31 - 1 else epoch + 1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)  # ordered set
    last_used_ms: int = 0
    connection: object = None  # the client connection it was last used on


@dataclass(frozen=True, slots=True)
class Context:
    """What one request may do: `error` set means answer only that (top-level error).
    `partitions`: the partitions to fetch; `final`: the session was closed by this request, and
    the member's acquired records in `released` go back to the others (Kafka's releaseSession)."""

    error: ErrorCode = ErrorCode.none
    partitions: tuple[TopicIdPartition, ...] = ()
    final: bool = False
    released: tuple[TopicIdPartition, ...] = ()


class ShareSessions:
    def __init__(self, limit: int = DEFAULT_LIMIT, idle_ms: int = DEFAULT_IDLE_MS) -> None:
        self.limit = limit
        self.idle_ms = idle_ms
        self.sessions: dict[SessionKey, ShareSession] = {}

    def fetch_context(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        wanted: Iterable[TopicIdPartition],
        forgotten: Iterable[TopicIdPartition],
        has_acknowledgements: bool,
        now_ms: int,
        connection: object = None,
    ) -> Context:
        """The context of a ShareFetch (module docstring), on client `connection`."""
        key = (group_id, member_id)
        wanted = list(wanted)
        if epoch == FINAL_EPOCH:
            if wanted:
                return Context(ErrorCode.invalid_request)
            closed = self.sessions.pop(key, None)
            if closed is None:
                return Context(ErrorCode.share_session_not_found)
            return Context(final=True, released=tuple(closed.partitions))
        if epoch == INITIAL_EPOCH:
            if has_acknowledgements:
                return Context(ErrorCode.invalid_request)
            self.sessions.pop(key, None)
            if len(self.sessions) >= self.limit and not self._evict_idle(now_ms):
                return Context(ErrorCode.share_session_limit_reached)
            opened = ShareSession(group_id, member_id, next_epoch(INITIAL_EPOCH))
            opened.partitions = dict.fromkeys(wanted)
            opened.last_used_ms = now_ms
            opened.connection = connection
            self.sessions[key] = opened
            return Context(partitions=tuple(opened.partitions))
        session = self.sessions.get(key)
        if session is None:
            return Context(ErrorCode.share_session_not_found)
        if session.epoch != epoch:
            return Context(ErrorCode.invalid_share_session_epoch)
        for tp in forgotten:
            session.partitions.pop(tp, None)
        for tp in wanted:
            session.partitions.setdefault(tp, None)
        session.epoch = next_epoch(epoch)
        session.last_used_ms = now_ms
        session.connection = connection
        return Context(partitions=tuple(session.partitions))

    def acknowledge_context(
        self, group_id: str, member_id: str, epoch: int, now_ms: int
    ) -> Context:
        """The context of a ShareAcknowledge (Kafka's
        SharePartitionManager.acknowledgeSessionUpdate): epoch 0 cannot acknowledge;
        -1 acknowledges and closes the session."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            return Context(ErrorCode.invalid_share_session_epoch)
        session = self.sessions.get(key)
        if session is None:
            return Context(ErrorCode.share_session_not_found)
        if epoch == FINAL_EPOCH:
            del self.sessions[key]
            return Context(final=True, released=tuple(session.partitions))
        if session.epoch != epoch:
            return Context(ErrorCode.invalid_share_session_epoch)
        session.epoch = next_epoch(epoch)
        session.last_used_ms = now_ms
        return Context()

    def connection_closed(self, connection: object) -> list[ShareSession]:
        """The sessions last used on `connection`, now gone (Kafka 4.1+, KAFKA-19015: a share
        consumer's connection dropping ends its session and it leaves the share partitions)."""
        gone = [s for s in self.sessions.values() if s.connection is connection]
        for session in gone:
            del self.sessions[(session.group_id, session.member_id)]
        return gone

    def drop_member(self, group_id: str, member_id: str) -> None:
        """The member left its group (or its connection closed): its session goes."""
        self.sessions.pop((group_id, member_id), None)

    def _evict_idle(self, now_ms: int) -> bool:
        for key, session in self.sessions.items():  # oldest first (insertion order)
            if now_ms - session.last_used_ms >= self.idle_ms:
                del self.sessions[key]
                return True
        return False
