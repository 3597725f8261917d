"""Classic groups, written sequences: join/sync/heartbeat/leave in every group state, static
members, error codes; every step answered by Kafka 4.4 and groupcoord and compared (harness.py)."""

from __future__ import annotations

import pytest

from tests.conformance import flows
from tests.conformance import harness as h
from tests.conformance.flows import SIBLINGS

UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS = 25, 22, 27


def errors(trees: list[h.Tree]) -> list[int]:
    return [int(t["error_code"]) for t in trees]


@pytest.mark.parametrize("version", range(10))
async def test_one_member_lifecycle(env: h.Env, version: int) -> None:
    """Empty -> PreparingRebalance -> CompletingRebalance -> Stable -> leave -> Empty, at one
    client release's versions."""
    sv, hv, lv = SIBLINGS[version]
    async with env.sequence() as s:
        await s.one("A", h.describe(0))  # Dead: no such group
        joined = await flows.join(s, ["A"], version)
        await s.one("A", h.describe(min(version, 5)))  # CompletingRebalance
        synced = await flows.sync(s, joined, sv)
        await s.one("A", h.heartbeat(hv, who="A", generation=joined["A"]["generation_id"]))
        await s.one("A", h.describe(min(version, 5)))  # Stable
        await s.one("A", h.join(version, who="A"))  # the leader rejoins, same protocols
        await s.one("A", h.leave(lv, "g", ("A", None)))
        await s.one("A", h.describe(min(version, 5)))  # Empty
        assert synced["A"]["error_code"] == 0


@pytest.mark.parametrize("version", [3, 5, 7, 9])
async def test_two_members_and_a_third(env: h.Env, version: int) -> None:
    """Two members join together; a third joins the Stable group; the others learn it from their
    heartbeats and rejoin; a follower's heartbeat during CompletingRebalance; a sync with the old
    generation."""
    sv, hv, _ = SIBLINGS[version]
    async with env.sequence() as s:
        joined = await flows.join(s, ["A", "B"], version)
        gen = joined["A"]["generation_id"]
        await s.one("B", h.heartbeat(hv, who="B", generation=gen))  # CompletingRebalance
        await flows.sync(s, joined, sv)
        await s.one("A", h.describe(min(version, 5)))
        # C's join parks (PreparingRebalance); A and B are told by heartbeat, then rejoin.
        if version >= 4:
            await s.step(("C", h.join(version, who="C")))  # MEMBER_ID_REQUIRED
        parked = await s.send(("C", h.join(version, who="C")))
        await s.wait_state("PreparingRebalance")
        await s.step(("A", h.heartbeat(hv, who="A", generation=gen)),
                     ("B", h.heartbeat(hv, who="B", generation=gen)))
        rejoin = await s.send(("A", h.join(version, who="A")), ("B", h.join(version, who="B")))
        await s.receive(parked, rejoin)
        joined = {w: s.kafka.last_join[w] for w in "ABC"}
        assert errors(list(joined.values())) == [0, 0, 0]
        await s.one("C", h.sync(sv, who="C", generation=gen))  # old generation
        await flows.sync(s, joined, sv)
        await s.one("B", h.heartbeat(hv, who="B", generation=joined["B"]["generation_id"]))
        await s.one("A", h.describe(min(version, 5)))


async def test_member_kicked_out_by_the_rebalance_timeout(env: h.Env) -> None:
    """A member that does not rejoin is removed when the (short) rebalance timeout expires; its
    next heartbeat is an unknown member's."""
    async with env.sequence() as s:
        joined = await flows.join(s, ["A", "B"], rebalance_ms=1000)
        await flows.sync(s, joined)
        gen = joined["A"]["generation_id"]
        answer = await s.one("A", h.join(who="A", rebalance_ms=1000,
                                         protos=h.protocols("range", metadata=h.subscription(
                                             "t1", "t2"))))
        assert answer["error_code"] == 0 and answer["generation_id"] == gen + 1
        assert len(answer["members"]) == 1
        await s.one("B", h.heartbeat(who="B", generation=gen))
        await s.one("B", h.sync(who="B", generation=gen))
        await s.one("A", h.describe())


async def test_errors_of_unknown_members_and_generations(env: h.Env) -> None:
    async with env.sequence() as s:
        await s.one("A", h.heartbeat(who="A", generation=1, member_id="nobody"))  # no group
        await s.one("A", h.sync(who="A", generation=1, member_id="nobody"))
        await s.one("A", h.leave(5, "g", ("=nobody", None)))
        await s.one("A", h.leave(2, "g", ("=nobody", None)))
        joined = await flows.join(s, ["A"])
        await s.one("A", h.heartbeat(who="A", generation=1))  # CompletingRebalance
        await flows.sync(s, joined)
        gen = joined["A"]["generation_id"]
        await s.one("A", h.heartbeat(who="A", generation=gen + 1))  # illegal generation
        await s.one("A", h.heartbeat(who="A", generation=gen, member_id="nobody"))
        await s.one("A", h.sync(who="A", generation=gen + 1))
        await s.one("A", h.sync(who="A", generation=gen, member_id="nobody"))
        await s.one("B", h.join(who="B", member_id="nobody"))  # unknown member joins
        await s.one("A", h.leave(5, "g", ("=nobody", None), ("A", None)))
        await s.one("A", h.describe())


@pytest.mark.parametrize("session_ms", [999, 1800001])
async def test_invalid_session_timeout(env: h.Env, session_ms: int) -> None:
    async with env.sequence() as s:
        for version in (0, 4, 9):
            await s.one("A", h.join(version, who="A", session_ms=session_ms))
        await s.one("A", h.describe())


async def test_inconsistent_protocols_and_bad_group_ids(env: h.Env) -> None:
    async with env.sequence() as s:
        await s.one("A", h.join(who="A", protos=()))  # no protocols
        await s.one("A", h.join(who="A", protocol_type=""))
        await s.one("A", h.join(group="", who="A"))
        joined = await flows.join(s, ["A"])
        await flows.sync(s, joined)
        await s.step(("B", h.join(who="B", protocol_type="connect")))
        await s.step(("B", h.join(who="B", protos=h.protocols("roundrobin"))))
        await s.one("A", h.describe())


async def test_sync_and_commit_during_a_rebalance(env: h.Env) -> None:
    """PreparingRebalance: a follower's sync is answered REBALANCE_IN_PROGRESS, so is a commit;
    CompletingRebalance: a commit too; the group completes once everyone rejoined."""
    async with env.sequence() as s:
        joined = await flows.join(s, ["A", "B"])
        await flows.sync(s, joined)
        gen = joined["A"]["generation_id"]
        offsets = {"t1": {0: 5}}
        await s.one("A", h.commit(who="A", generation=gen, offsets=offsets))  # Stable: ok
        # A rejoins with other metadata: a rebalance; B's sync, heartbeat and commit see it.
        new = h.protocols("range", metadata=h.subscription("t1", "t3"))
        parked = await s.send(("A", h.join(who="A", protos=new)))
        await s.wait_state("PreparingRebalance")
        await s.step(("B", h.sync(who="B", generation=gen)),
                     ("B", h.heartbeat(who="B", generation=gen)),
                     ("B", h.commit(who="B", generation=gen, offsets=offsets)),
                     ("C", h.describe()))
        answers = await s.receive(parked, await s.send(("B", h.join(who="B"))))
        assert answers[0]["error_code"] == 0
        gen2 = answers[0]["generation_id"]
        await s.one("B", h.commit(who="B", generation=gen2, offsets=offsets))  # Completing
        await s.one("B", h.commit(who="B", generation=gen, offsets=offsets))
        await flows.sync(s, {"A": s.kafka.last_join["A"], "B": s.kafka.last_join["B"]})
        await s.one("B", h.commit(who="B", generation=gen2, offsets=offsets))
        await s.one("B", h.offset_fetch(topics={"t1": [0, 1]}))


@pytest.mark.parametrize("version", [5, 7, 9])
async def test_static_members(env: h.Env, version: int) -> None:
    """group.instance.id: join with an id at once, a restart (empty member id) replaces the member
    without a rebalance, the old member id is fenced, leave by instance id."""
    sv, hv, lv = SIBLINGS[version]
    statics = {"A": "inst-a", "B": "inst-b"}
    async with env.sequence() as s:
        joined = await flows.join(s, ["A", "B"], version, statics=statics)
        await flows.sync(s, joined, sv, statics=statics)
        gen = joined["A"]["generation_id"]
        old = s.kafka.mid("B"), s.groupcoord.mid("B")
        await s.one("A", h.describe(min(version, 5)))
        # B restarts: a fresh connection, no member id, the same instance id.
        s.kafka.member_ids.pop("B"), s.groupcoord.member_ids.pop("B")
        answer = await s.one("B", h.join(version, who="B", instance="inst-b"))
        assert answer["error_code"] == 0
        sides = s.kafka, s.groupcoord
        await s.one("A", h.heartbeat(hv, who="A", generation=gen, instance="inst-a"))
        await s.one("X", lambda side: h.heartbeat(hv, who="X", generation=gen, instance="inst-b",
                                                  member_id=old[sides.index(side)])(side))
        await s.one("B", h.sync(sv, who="B", generation=gen, instance="inst-b"))
        await s.one("B", h.heartbeat(hv, who="B", generation=gen, instance="inst-b"))
        await s.one("A", h.heartbeat(hv, who="A", generation=gen, instance="inst-other"))
        await s.one("A", h.describe(min(version, 5)))
        if lv >= 3:
            await s.one("A", h.leave(lv, "g", ("=wrong", "inst-b"), ("", "inst-missing")))
            await s.one("B", h.leave(lv, "g", ("", "inst-b")))
        await s.one("A", h.describe(min(version, 5)))
        joined = await flows.join(s, ["A"], version, statics=statics)
        await s.one("A", h.describe(min(version, 5)))


@pytest.mark.parametrize("version", [8, 9])
async def test_static_leader_restarts_in_stable(env: h.Env, version: int) -> None:
    """The static leader restarts with other metadata that keeps the selected protocol: no
    rebalance; v9 tells it it leads (skip_assignment), v8 names its old id as the leader."""
    statics = {"A": "inst-a"}
    async with env.sequence() as s:
        joined = await flows.join(s, ["A", "B"], version, statics=statics)
        await flows.sync(s, joined, 5, statics=statics)
        s.kafka.member_ids.pop("A"), s.groupcoord.member_ids.pop("A")
        new = h.protocols("range", metadata=h.subscription("t2"))
        answer = await s.one("A", h.join(version, who="A", instance="inst-a", protos=new))
        assert answer["error_code"] == 0
        await s.one("A", h.sync(5, who="A", generation=answer["generation_id"], instance="inst-a"))
        await s.one("A", h.describe())


async def test_static_member_restarts_in_completing_rebalance(env: h.Env) -> None:
    """A known static member rejoining with an empty id while CompletingRebalance always
    rebalances; the other member joins the new phase."""
    statics = {"A": "inst-a"}
    async with env.sequence() as s:
        await flows.join(s, ["A", "B"], statics=statics)
        s.kafka.member_ids.pop("A"), s.groupcoord.member_ids.pop("A")
        parked = await s.send(("A", h.join(who="A", instance="inst-a")))
        await s.wait_state("PreparingRebalance")
        await s.receive(parked, await s.send(("B", h.join(who="B"))))
        await flows.sync(s, {w: s.kafka.last_join[w] for w in "AB"}, statics=statics)
        await s.one("A", h.describe())


async def test_protocol_choice(env: h.Env) -> None:
    """The most preferred protocol listed by everyone wins; a tie between two (each member
    preferring another) is broken in a way that is listed."""
    async with env.sequence() as s:
        joined = await flows.join(s, ["A", "B", "C"], protos=h.protocols("range", "roundrobin"))
        await flows.sync(s, joined)
        # Everyone changes its metadata, so each join starts or joins the rebalance, in any order.
        meta = h.subscription("t2")
        await s.step(*((w, h.join(who=w, protos=h.protocols(*p, metadata=meta))) for w, p in (
            ("A", ("roundrobin", "range")), ("B", ("roundrobin", "range")),
            ("C", ("range", "roundrobin")))))
        await s.one("A", h.describe())


async def test_protocol_tie(env: h.Env) -> None:
    async with env.sequence() as s:
        await flows.join(s, ["A", "B"], protos=h.protocols("range", "roundrobin"))
        meta = h.subscription("t2")
        a, b = ("range", "roundrobin"), ("roundrobin", "range")
        await s.step(("A", h.join(who="A", protos=h.protocols(*a, metadata=meta))),
                     ("B", h.join(who="B", protos=h.protocols(*b, metadata=meta))))
        await s.one("A", h.describe())


async def test_leader_leaves_in_completing_rebalance(env: h.Env) -> None:
    """The leader leaves before syncing: the group rebalances, the follower's sync fails with
    REBALANCE_IN_PROGRESS and its rejoin makes it the leader of the next generation."""
    async with env.sequence() as s:
        joined = await flows.join(s, ["A", "B"])
        leader = s.kafka.who(joined["A"]["leader"])
        follower = "B" if leader == "A" else "A"
        await s.one(leader, h.leave(5, "g", (leader, None)))
        s.notes["leader_left"] = True
        await s.one(follower, h.sync(who=follower, generation=joined[follower]["generation_id"]))
        await s.one(follower, h.join(who=follower))
        await s.one(follower, h.describe())


async def test_everyone_leaves_then_delete(env: h.Env) -> None:
    """Stable -> everyone leaves (Empty, offsets kept) -> DeleteGroups -> Dead."""
    async with env.sequence() as s:
        joined = await flows.join(s, ["A", "B"])
        await flows.sync(s, joined)
        gen = joined["A"]["generation_id"]
        await s.one("A", h.commit(who="A", generation=gen, offsets={"t1": {0: 1, 1: 2}}))
        await s.one("A", h.delete_groups(2, "g"))  # not empty
        await s.one("A", h.leave(5, "g", ("A", None), ("B", None)))
        await s.one("A", h.describe())
        await s.one("A", h.offset_fetch(topics=None))
        await s.one("A", h.delete_groups(2, "g"))
        await s.one("A", h.describe())
        await s.one("A", h.offset_fetch(topics=None))
        await s.one("A", h.heartbeat(who="A", generation=gen))
        await flows.join(s, ["A"])  # a new life after Dead


@pytest.mark.parametrize("version", [4, 9])
async def test_sole_member_rejoins_then_a_newcomer(env: h.Env, version: int) -> None:
    """The group's only member rejoins (a generation of one at once), then a new member joins
    the CompletingRebalance group: the phase waits for the first member's rejoin."""
    sv = SIBLINGS[version][0]
    async with env.sequence() as s:
        joined = await flows.join(s, ["S"], version)
        await flows.sync(s, joined, sv)
        await flows.join(s, ["S", "A"], version, protos=h.protocols(
            "range", metadata=h.subscription("t2")))
        await s.one("A", h.describe(5))
