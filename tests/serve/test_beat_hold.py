"""Held consumer beats (coordinator.serve.beat_hold), over real sockets with raw-protocol
members: a newcomer's beat sent before the holder released its partitions is answered with them
once released; a request behind a held beat on the same connection sends it on at once and is
answered after it, in order; unreleased, it is answered half a heartbeat interval after it
arrived; a closed connection drops it."""

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


async def _holder_and_newcomer(
    server: Server, conns: list[RawConn]
) -> tuple[RawConn, wire.ConsumerHeartbeatResponse, RawConn, wire.ConsumerHeartbeatResponse]:
    """a holds every partition (acked); b joined: its target is half of a's."""
    port = server.options.port
    conns += [a := await RawConn.open(HOST, port), b := await RawConn.open(HOST, port)]
    ja = await _join(a)
    assert _count(ja.assignment) == PARTITIONS
    ack = wire.consumer_group_heartbeat_v0("cg", ja.member_id or "", ja.member_epoch,
                                           owned=ja.assignment)  # fmt: skip
    assert (await a.consumer_beat(ack)).error_code == 0
    jb = await _join(b)
    assert _count(jb.assignment) == 0  # all of its target is still a's
    return a, ja, b, jb


def _plain(r: wire.ConsumerHeartbeatResponse, owned: wire.Owned = ()) -> bytes:
    return wire.consumer_group_heartbeat_v0("cg", r.member_id or "", r.member_epoch, owned=owned)


async def test_a_newcomers_beat_sent_before_the_release_is_answered_with_the_partitions(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, config(beat_ms=10_000)) as (server, conns):
        a, ja, b, jb = await _holder_and_newcomer(server, conns)
        cid = b.send(wire.CONSUMER_GROUP_HEARTBEAT, 0, _plain(jb), flexible=True)
        sent = time.monotonic()
        await wait_until(lambda: len(server.beat_hold) == 1, timeout=10, what="b's beat held")
        # a learns of its revocation and acks it at once: the partitions are free.
        revoke = await a.consumer_beat(_plain(ja, ja.assignment or ()))
        assert _count(revoke.assignment) == PARTITIONS // 2
        assert (await a.consumer_beat(_plain(revoke, revoke.assignment or ()))).error_code == 0
        got, body = await b.answer(timeout=10)
        assert got == cid
        answer = wire.decode_consumer_group_heartbeat_v0(body)
        # Without the hold, b's beat was answered "nothing yet" before a acked.
        assert _count(answer.assignment) == PARTITIONS // 2, answer
        assert time.monotonic() - sent < 2.5  # woken by the release, not at its 5 s deadline
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
        assert (await _join(c)).member_epoch > jb.member_epoch  # the server goes on
