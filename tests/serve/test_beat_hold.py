"""Held consumer beats (coordinator.serve.beat_hold), over real sockets with raw-protocol
members: a newcomer's beat sent before the holder released its partitions is answered with them
once released; a request behind a held beat on the same connection sends it on at once and is
answered after it, in order; unreleased, it is answered half a heartbeat interval after it
arrived; a closed connection drops it. A join that would be answered with no partitions waits
the same way: answered with them once released (or once its group's paced target is made), and
at its deadline with an empty assignment, never with none."""

from __future__ import annotations

import time
from pathlib import Path

from bench import wire
from coordinator.core.coordinator import CoordinatorConfig
from coordinator.serve.server import Server
from tests.serve.test_commit_batch import HOST, running
from tests.support.durability_util import OFFSET_COMMIT, RawConn, decode_commit_v2, offset_commit_v2
from tests.support.realclients import wait_until

BEAT_MS = 2_000  # the heartbeat interval: a beat is held 1 s at most
PARTITIONS = 4  # the "orders" topic of `running`


def config(beat_ms: int = BEAT_MS) -> CoordinatorConfig:
    # No pacing: the newcomer's join computes the target at once.
    return CoordinatorConfig(
        consumer_heartbeat_interval_ms=beat_ms, consumer_assignment_interval_ms=0
    )


def _count(owned: wire.Owned | None) -> int:
    return sum(len(ps) for _, ps in owned or ())


async def _join(conn: RawConn) -> wire.ConsumerHeartbeatResponse:
    body = wire.consumer_group_heartbeat_v0(
        "cg", "", 0, rebalance_timeout_ms=60_000, topics=["orders"], owned=()
    )
    r = await conn.consumer_beat(body)
    assert r.error_code == 0 and r.member_id
    return r


_JOIN = wire.consumer_group_heartbeat_v0(
    "cg", "", 0, rebalance_timeout_ms=60_000, topics=["orders"], owned=()
)


async def _holder(
    server: Server, conns: list[RawConn]
) -> tuple[RawConn, wire.ConsumerHeartbeatResponse, RawConn]:
    """a holds every partition (acked); b is connected."""
    port = server.options.port
    conns += [a := await RawConn.open(HOST, port), b := await RawConn.open(HOST, port)]
    ja = await _join(a)
    assert _count(ja.assignment) == PARTITIONS
    ack = wire.consumer_group_heartbeat_v0("cg", ja.member_id or "", ja.member_epoch,
                                           owned=ja.assignment)  # fmt: skip
    assert (await a.consumer_beat(ack)).error_code == 0
    return a, ja, b


async def _holder_and_newcomer(
    server: Server, conns: list[RawConn]
) -> tuple[RawConn, wire.ConsumerHeartbeatResponse, RawConn, wire.ConsumerHeartbeatResponse]:
    """a holds every partition (acked); b joined: its target is half of a's. b's join waits for
    them; a commit sent behind it pushes its answer out (no partitions yet)."""
    a, ja, b = await _holder(server, conns)
    cid = b.send(wire.CONSUMER_GROUP_HEARTBEAT, 0, _JOIN, flexible=True)
    await wait_until(lambda: len(server.beat_hold) == 1, timeout=10, what="b's join held")
    commit = b.send(OFFSET_COMMIT, 2, offset_commit_v2("simple", "orders", {0: 1}))
    got, body = await b.answer(timeout=10)
    jb = wire.decode_consumer_group_heartbeat_v0(body)
    assert got == cid and jb.error_code == 0 and jb.member_id, jb
    assert jb.assignment == ()  # all of its target is still a's; a join's answer carries one
    got, body = await b.answer(timeout=10)
    assert got == commit and decode_commit_v2(body) == {0: 0}
    assert len(server.beat_hold) == 0
    return a, ja, b, jb


def _plain(r: wire.ConsumerHeartbeatResponse, owned: wire.Owned = ()) -> bytes:
    return wire.consumer_group_heartbeat_v0("cg", r.member_id or "", r.member_epoch, owned=owned)


async def _held_then_released(
    server: Server, a: RawConn, ja: wire.ConsumerHeartbeatResponse, b: RawConn, body: bytes,
    what: str,
) -> wire.ConsumerHeartbeatResponse:
    """b sends `body`; once it is held, a learns of its revocation and acks it at once (half
    the partitions are free): b's answer, woken by the release, not at its 5 s deadline."""
    cid = b.send(wire.CONSUMER_GROUP_HEARTBEAT, 0, body, flexible=True)
    sent = time.monotonic()
    await wait_until(lambda: len(server.beat_hold) == 1, timeout=10, what=what)
    revoke = await a.consumer_beat(_plain(ja, ja.assignment or ()))
    assert _count(revoke.assignment) == PARTITIONS // 2
    assert (await a.consumer_beat(_plain(revoke, revoke.assignment or ()))).error_code == 0
    got, answer = await b.answer(timeout=10)
    assert got == cid
    assert time.monotonic() - sent < 2.5
    return wire.decode_consumer_group_heartbeat_v0(answer)


async def test_a_newcomers_beat_sent_before_the_release_is_answered_with_the_partitions(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, config(beat_ms=10_000)) as (server, conns):
        a, ja, b, jb = await _holder_and_newcomer(server, conns)
        answer = await _held_then_released(server, a, ja, b, _plain(jb), "b's beat held")
        # Without the hold, b's beat was answered "nothing yet" before a acked.
        assert _count(answer.assignment) == PARTITIONS // 2, answer
        assert len(server.beat_hold) == 0


async def test_a_commit_behind_a_held_beat_is_answered_at_once_and_in_order(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, config(beat_ms=20_000)) as (server, conns):
        _, _, b, jb = await _holder_and_newcomer(server, conns)
        beat = b.send(wire.CONSUMER_GROUP_HEARTBEAT, 0, _plain(jb), flexible=True)
        await wait_until(lambda: len(server.beat_hold) == 1, timeout=10, what="b's beat held")
        sent = time.monotonic()
        commit = b.send(OFFSET_COMMIT, 2, offset_commit_v2("simple", "orders", {0: 7}))
        first, body = await b.answer(timeout=10)
        assert first == beat  # the held beat's answer first (still waiting: nothing new)
        answer = wire.decode_consumer_group_heartbeat_v0(body)
        assert answer.error_code == 0 and answer.assignment is None
        second, body = await b.answer(timeout=10)
        assert second == commit and decode_commit_v2(body) == {0: 0}
        assert time.monotonic() - sent < 2.0  # not the beat's 10 s deadline
        assert len(server.beat_hold) == 0


async def test_an_unreleased_beat_is_answered_half_an_interval_after_it_arrived(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, config()) as (server, conns):
        _, _, b, jb = await _holder_and_newcomer(server, conns)
        sent = time.monotonic()
        answer = await b.consumer_beat(_plain(jb), timeout=10)
        waited = time.monotonic() - sent
        assert answer.error_code == 0 and answer.assignment is None
        assert answer.member_epoch == jb.member_epoch
        # Held to its deadline (BEAT_MS / 2), and answered well inside one interval (librdkafka
        # times a ConsumerGroupHeartbeat out after one).
        assert BEAT_MS / 2000 - 0.05 <= waited < BEAT_MS / 1000, waited
        assert len(server.beat_hold) == 0


async def test_a_closed_connection_drops_its_held_beat(tmp_path: Path) -> None:
    async with running(tmp_path, config(beat_ms=20_000)) as (server, conns):
        _, _, b, jb = await _holder_and_newcomer(server, conns)
        b.send(wire.CONSUMER_GROUP_HEARTBEAT, 0, _plain(jb), flexible=True)
        await wait_until(lambda: len(server.beat_hold) == 1, timeout=10, what="b's beat held")
        b.close()
        await wait_until(lambda: len(server.beat_hold) == 0, timeout=10, what="dropped")
        conns.append(c := await RawConn.open(HOST, server.options.port))
        cid = c.send(wire.CONSUMER_GROUP_HEARTBEAT, 0, _JOIN, flexible=True)
        commit = c.send(OFFSET_COMMIT, 2, offset_commit_v2("simple", "orders", {0: 1}))
        got, body = await c.answer(timeout=10)  # the server goes on
        assert got == cid
        assert wire.decode_consumer_group_heartbeat_v0(body).member_epoch > jb.member_epoch
        assert (await c.answer(timeout=10))[0] == commit


async def test_a_join_sent_before_the_release_is_answered_with_the_partitions(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, config(beat_ms=10_000)) as (server, conns):
        a, ja, b = await _holder(server, conns)
        answer = await _held_then_released(server, a, ja, b, _JOIN, "b's join held")
        # Without the hold, b's join was answered with no partitions before a acked.
        assert answer.error_code == 0 and answer.member_id, answer
        assert _count(answer.assignment) == PARTITIONS // 2, answer
        assert answer.member_epoch > ja.member_epoch
        assert len(server.beat_hold) == 0


async def test_an_unreleased_join_is_answered_at_its_deadline_with_an_empty_assignment(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, config()) as (server, conns):
        _, _, b = await _holder(server, conns)
        sent = time.monotonic()
        answer = await b.consumer_beat(_JOIN, timeout=10)
        waited = time.monotonic() - sent
        assert answer.error_code == 0 and answer.member_id and answer.member_epoch > 0
        assert answer.assignment == ()  # not None: a join's answer always carries one
        assert BEAT_MS / 2000 - 0.05 <= waited < BEAT_MS / 1000, waited
        assert len(server.beat_hold) == 0


async def test_a_join_into_a_paced_group_is_answered_with_the_paced_target(
    tmp_path: Path,
) -> None:
    """The group's first member was assigned at once; b's join, a bump inside the assignment
    interval, waits for the paced target and is answered by it (here with partitions a still
    holds: after a's release)."""
    cfg = CoordinatorConfig(consumer_heartbeat_interval_ms=BEAT_MS,
                            consumer_assignment_interval_ms=300)  # fmt: skip
    async with running(tmp_path, cfg) as (server, conns):
        a, ja, b = await _holder(server, conns)
        cid = b.send(wire.CONSUMER_GROUP_HEARTBEAT, 0, _JOIN, flexible=True)
        await wait_until(lambda: len(server.beat_hold) == 1, timeout=10, what="b's join held")
        # a's beats: nothing to revoke until the paced target is made, then half.
        revoke = await wait_until(
            lambda: _revoked(a, ja), timeout=10, what="a told to revoke by the paced target"
        )
        assert (await a.consumer_beat(_plain(revoke, revoke.assignment or ()))).error_code == 0
        got, body = await b.answer(timeout=10)
        answer = wire.decode_consumer_group_heartbeat_v0(body)
        assert got == cid and _count(answer.assignment) == PARTITIONS // 2, answer


async def _revoked(
    a: RawConn, ja: wire.ConsumerHeartbeatResponse
) -> wire.ConsumerHeartbeatResponse | None:
    r = await a.consumer_beat(_plain(ja, ja.assignment or ()))
    assert r.error_code == 0, r
    return r if r.assignment is not None and _count(r.assignment) < PARTITIONS else None


async def test_a_stop_answers_held_beats_and_joins_not_coordinator(tmp_path: Path) -> None:
    """A graceful stop answers what it parked with NOT_COORDINATOR (clients look the coordinator
    up again); a held beat or join is parked too, not dropped unanswered."""
    async with running(tmp_path, config(beat_ms=20_000)) as (server, conns):
        _, _, b, jb = await _holder_and_newcomer(server, conns)
        conns.append(c := await RawConn.open(HOST, server.options.port))
        beat = b.send(wire.CONSUMER_GROUP_HEARTBEAT, 0, _plain(jb), flexible=True)
        join = c.send(wire.CONSUMER_GROUP_HEARTBEAT, 0, _JOIN, flexible=True)
        await wait_until(lambda: len(server.beat_hold) == 2, timeout=10, what="both held")
        await server.stop()
        for conn, cid in ((b, beat), (c, join)):
            got, body = await conn.answer(timeout=10)
            assert got == cid
            assert wire.decode_consumer_group_heartbeat_v0(body).error_code == 16  # NOT_COORDINATOR
