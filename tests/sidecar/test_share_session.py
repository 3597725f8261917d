"""Share sessions (coordinator.sidecar.share_session), the pure rules: epochs, what each request
fetches, the session limit, and connections closing."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from coordinator.sidecar.share_session import ShareSessions, next_epoch

A, B, C = ((uuid.UUID(int=1), p) for p in range(3))


def test_epochs_move_on_and_wrap() -> None:
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(2**31 - 1) == 1  # never 0 again: that would open a new session
    assert next_epoch(-1) == -1


def test_incremental_requests_add_and_forget_partitions() -> None:
    sessions = ShareSessions()
    opened = sessions.fetch_context("g", "m", 0, [A], [], False, 0)
    assert opened.error == ErrorCode.none and opened.partitions == (A,)
    more = sessions.fetch_context("g", "m", 1, [B], [], False, 1)
    assert more.partitions == (A, B)  # the session's partitions, not only the request's
    fewer = sessions.fetch_context("g", "m", 2, [], [A], False, 2)
    assert fewer.partitions == (B,)
    assert sessions.fetch_context("g", "m", 2, [], [], False, 3).error == \
        ErrorCode.invalid_share_session_epoch  # the same epoch twice
    # A new epoch 0 replaces the session; the final epoch closes it and names its partitions.
    assert sessions.fetch_context("g", "m", 0, [C], [], False, 4).partitions == (C,)
    final = sessions.fetch_context("g", "m", -1, [], [], True, 5)
    assert final.final and final.released == (C,)
    assert sessions.fetch_context("g", "m", 1, [], [], False, 6).error == \
        ErrorCode.share_session_not_found


def test_acknowledge_epochs() -> None:
    sessions = ShareSessions()
    sessions.fetch_context("g", "m", 0, [A], [], False, 0)
    assert sessions.acknowledge_context("g", "m", 0, 1).error == \
        ErrorCode.invalid_share_session_epoch
    assert sessions.acknowledge_context("g", "m", 1, 1).error == ErrorCode.none
    assert sessions.fetch_context("g", "m", 2, [], [], True, 2).error == ErrorCode.none
    closed = sessions.acknowledge_context("g", "m", -1, 3)
    assert closed.final and closed.released == (A,)
    assert sessions.acknowledge_context("g", "m", -1, 4).error == \
        ErrorCode.share_session_not_found


def test_the_limit_evicts_an_idle_session_or_refuses() -> None:
    sessions = ShareSessions(limit=2, idle_ms=1000)
    sessions.fetch_context("g", "a", 0, [A], [], False, 0)
    sessions.fetch_context("g", "b", 0, [A], [], False, 500)
    assert sessions.fetch_context("g", "c", 0, [A], [], False, 900).error == \
        ErrorCode.share_session_limit_reached
    assert sessions.fetch_context("g", "c", 0, [A], [], False, 1000).error == ErrorCode.none
    assert ("g", "a") not in sessions.sessions  # the idle one made room


def test_a_closed_connection_ends_the_sessions_last_used_on_it() -> None:
    sessions = ShareSessions()
    first, second = object(), object()
    sessions.fetch_context("g", "m", 0, [A], [], False, 0, first)
    sessions.fetch_context("g", "n", 0, [A], [], False, 0, first)
    sessions.fetch_context("g", "n", 1, [], [], False, 1, second)  # moved to another connection
    gone = sessions.connection_closed(first)
    assert [(s.group_id, s.member_id) for s in gone] == [("g", "m")]
    assert ("g", "n") in sessions.sessions
