"""KIP-848 consumer groups, written sequences: ConsumerGroupHeartbeat (68) epochs and assignments
with the uniform and range assignors, regex subscriptions, leave (-1) and static leave (-2),
errors, ConsumerGroupDescribe (69) and offsets with member epochs; compared step by step."""

from __future__ import annotations

import pytest

from tests.conformance import harness as h
from tests.conformance.harness import Sequence


async def settle(s: Sequence, whos: list[str], rounds: int = 30) -> None:
    """Each member heartbeats with its own epoch and what it owns, on each server, until a round
    changes nothing on either server and both agree: the group's reconciliation, step by step
    (every answer compared)."""
    for _ in range(rounds):
        before = (dict(s.kafka.cg), dict(s.groupcoord.cg))
        await s.step(*((w, h.cg_follow(who=w)) for w in whos))
        if (dict(s.kafka.cg), dict(s.groupcoord.cg)) == before and s.kafka.cg == s.groupcoord.cg:
            return
    raise AssertionError(f"the group did not settle in {rounds} rounds: kafka {s.kafka.cg}, "
                         f"groupcoord {s.groupcoord.cg}")


@pytest.mark.parametrize("assignor", [None, "uniform", "range"])
async def test_members_join_share_and_leave(env: h.Env, assignor: str | None) -> None:
    """A joins t1 and t3; B joins t1 and t2; C joins t3. Each step's epochs and assignments
    (including revocations) compared; then B leaves (-1) and the rest rebalance."""
    async with env.sequence() as s:
        await s.one("A", h.cg_heartbeat(who="A", epoch=0, topics=("t1", "t3"), assignor=assignor))
        await s.one("A", h.cg_describe(1))
        await s.one("B", h.cg_heartbeat(who="B", epoch=0, topics=("t1", "t2"),
                                        assignor=assignor))
        await settle(s, ["A", "B"])
        await s.one("C", h.cg_heartbeat(who="C", epoch=0, topics=("t3",), assignor=assignor))
        await settle(s, ["A", "B", "C"])
        await s.one("A", h.cg_describe(1))
        epoch = s.kafka.cg["B"][0]
        await s.one("B", h.cg_heartbeat(who="B", epoch=-1))
        await s.one("B", h.cg_heartbeat(who="B", epoch=epoch))  # after leaving
        await settle(s, ["A", "C"])
        await s.one("A", h.cg_describe(0))


async def test_static_member_leaves_and_returns(env: h.Env) -> None:
    """A static member's leave (-2) keeps its partitions; its return with the same instance id
    gets them back; another member with the same instance id is refused meanwhile."""
    async with env.sequence() as s:
        await s.one("A", h.cg_heartbeat(who="A", epoch=0, topics=("t1",), instance="inst-a"))
        await s.one("B", h.cg_heartbeat(who="B", epoch=0, topics=("t1",)))
        await settle(s, ["A", "B"])
        epoch = s.kafka.cg["A"][0]
        await s.one("A", h.cg_heartbeat(who="A", epoch=-2, instance="inst-a"))
        await s.one("A", h.cg_describe(1))
        await s.one("X", h.cg_heartbeat(who="X", epoch=0, topics=("t1",), instance="inst-a"))
        old = s.kafka.mid("A")  # the client's own id: the same on both servers
        await s.one("A2", h.cg_heartbeat(who="A2", epoch=0, topics=("t1",), instance="inst-a"))
        await s.one("A", h.cg_heartbeat(who="A", epoch=epoch, instance="inst-a", member_id=old))
        await settle(s, ["A2", "B"])
        await s.one("A", h.cg_describe(1))


async def test_regex_subscription(env: h.Env) -> None:
    """A member subscribed by regex to t1 and t2; another by name to t3."""
    async with env.sequence() as s:
        s.notes["regex_pending"] = True  # until Kafka's background resolution is seen
        await s.one("A", h.cg_heartbeat(who="A", epoch=0, regex="{prefix}t[12]"))
        await s.one("B", h.cg_heartbeat(who="B", epoch=0, topics=("t3",)))
        await settle(s, ["A", "B"])
        s.notes["regex_pending"] = False
        await s.one("A", h.cg_describe(1))
        await s.one("A", h.cg_heartbeat(who="A", epoch=0, regex="[invalid"))


async def test_heartbeat_errors(env: h.Env) -> None:
    async with env.sequence(("g", "classic")) as s:
        await s.one("A", h.cg_heartbeat(who="A", epoch=3, topics=("t1",)))  # no such group
        await s.one("A", h.cg_heartbeat(who="A", epoch=-1))  # leave of no group
        await s.one("A", h.cg_heartbeat(who="A", epoch=0, topics=("t1",), assignor="nope"))
        await s.one("A", h.cg_heartbeat(who="A", epoch=0))  # no subscription
        await s.one("A", h.cg_heartbeat(who="A", epoch=0, topics=("t1",), member_id=""))
        first = await s.one("A", h.cg_heartbeat(who="A", epoch=0, topics=("t1",)))
        epoch = first["member_epoch"]
        await s.one("A", h.cg_heartbeat(who="A", epoch=epoch + 1))  # fenced
        await s.one("A", h.cg_heartbeat(who="A", epoch=epoch, member_id="unknown"))
        await s.one("B", h.cg_heartbeat(who="B", epoch=1, topics=("t1",)))  # unknown member
        await s.one("A", h.cg_heartbeat(who="A", epoch=epoch, rebalance_ms=-5))
        # A classic group's id, a consumer group's id in a classic join.
        await s.one("C", h.join(group="classic", who="C"))
        await s.one("C", h.join(group="classic", who="C"))
        await s.one("D", h.cg_heartbeat(group="classic", who="D", epoch=0, topics=("t1",)))
        await s.one("E", h.join(group="g", who="E"))
        await s.one("A", h.cg_describe(1, "g", "classic", "unknown", ""))
        await s.one("A", h.describe(5, "g"))


@pytest.mark.parametrize("version", [0, 1])
async def test_server_generated_member_id(env: h.Env, version: int) -> None:
    """v0 lets the server choose the member id (an empty one); v1 requires the client's."""
    async with env.sequence() as s:
        await s.one("A", h.cg_heartbeat(version, who="A", epoch=0, topics=("t2",),
                                        member_id=""))
        await s.one("A", h.cg_describe(version))


async def test_offsets_with_member_epochs(env: h.Env) -> None:
    """OffsetCommit v9 and OffsetFetch v9 carry the member epoch: current, stale, from the
    future, an unknown member; an admin commit (-1) to a non-empty consumer group."""
    async with env.sequence() as s:
        first = await s.one("A", h.cg_heartbeat(who="A", epoch=0, topics=("t1",)))
        epoch = first["member_epoch"]
        offsets = {"t1": {0: 7}}
        await s.one("A", h.commit(9, who="A", generation=epoch, offsets=offsets))
        await s.one("A", h.commit(9, who="A", generation=epoch - 1, offsets=offsets))
        await s.one("A", h.commit(9, who="A", generation=epoch + 1, offsets=offsets))
        await s.one("A", h.commit(9, who="A", generation=epoch, member_id="nobody",
                                  offsets=offsets))
        await s.one("B", h.commit(9, offsets=offsets))
        await s.one("A", h.commit(8, who="A", generation=epoch, offsets=offsets))
        await s.one("A", h.offset_fetch(9, who="A", member_epoch=epoch, topics={"t1": [0]}))
        await s.one("A", h.offset_fetch(9, who="A", member_epoch=epoch + 1, topics=None))
        await s.one("A", h.offset_fetch(9, who="", member_epoch=-1, topics=None))
        await s.one("A", h.offset_delete(topics={"t1": [0]}))
        await s.one("A", h.cg_heartbeat(who="A", epoch=-1))
        await s.one("A", h.offset_delete(topics={"t1": [0]}))
        await s.one("A", h.list_groups(5))
