"""Multi-step classic-group moves shared by the written and the generated sequences."""

from __future__ import annotations

from typing import Any

from tests.conformance import harness as h
from tests.conformance.harness import Sequence, Tree

MEMBER_ID_REQUIRED = 79


# JoinGroup version -> the SyncGroup, Heartbeat and LeaveGroup versions of the same client release
# (2.0: 3/2/2/2, 2.3: 5/3/3/3 static members, 2.4: 6/4/4/4 flexible, 2.5: 7/5, 3.2: 8/5 reasons).
SIBLINGS = {0: (0, 0, 0), 1: (0, 0, 0), 2: (1, 1, 1), 3: (2, 2, 2), 4: (2, 2, 2), 5: (3, 3, 3),
            6: (4, 4, 4), 7: (5, 4, 4), 8: (5, 4, 5), 9: (5, 4, 5)}


async def join(s: Sequence, whos: list[str], version: int = 9, group: str = "g",
               statics: dict[str, str] | None = None, **kw: Any) -> dict[str, Tree]:
    """`whos` join one generation, in an order both servers see alike. whos[0] starts the join
    phase; each member the group does not know yet is sent once both servers are in
    PreparingRebalance and counted the one before it (a new dynamic member first gets its id
    through MEMBER_ID_REQUIRED, v4+, right then: a pending member holds the phase open); the
    known members come last, so none lands in a Stable or CompletingRebalance group. When
    whos[0] is the group's only member its join completes a generation at once; the others
    then start the next phase and whos[0] rejoins it. Every member's join must start or join a
    rebalance (a new member, the leader, changed metadata, or a group already rebalancing).
    Returns each member's final JoinGroup answer."""
    statics = statics or {}

    def call(who: str) -> tuple[str, h.Builder]:
        return who, h.join(version, group, who, instance=statics.get(who), **kw)

    async def with_id(who: str) -> None:
        if version >= 4 and not s.kafka.mid(who) and who not in statics:
            await s.step(call(who))  # MEMBER_ID_REQUIRED

    first, rest = whos[0], whos[1:]
    await with_id(first)
    if not rest:
        return {first: (await s.step(call(first)))[0]}
    present = await s.members(group)
    if await s.state(group) in ("Empty", "Dead") or present <= {first}:
        await s.step(call(first))
        parked = await _newcomers_one_by_one(s, list(rest), group, call, with_id, 1)
        answers = await s.receive(*parked, await s.send(call(first)))
        return dict(zip([*rest, first], answers, strict=True))
    parked = [await s.send(call(first))]
    await s.wait_state("PreparingRebalance", group)
    newcomers = [w for w in rest if w not in present]
    known = [w for w in rest if w in present]
    parked += await _newcomers_one_by_one(s, newcomers, group, call, with_id,
                                          len(present | {first}))
    answers = await s.receive(*parked, await s.send(*(call(w) for w in known)))
    return dict(zip([first, *newcomers, *known], answers, strict=True))


async def _newcomers_one_by_one(s: Sequence, newcomers: list[str], group: str, call: Any,
                                with_id: Any, count: int) -> list[h.Pending]:
    """Each newcomer's join, sent once both servers counted the one before: a member the group
    does not know yet must be in before the last known member's join can complete the phase."""
    parked = []
    for who in newcomers:
        await with_id(who)
        parked.append(await s.send(call(who)))
        count += 1
        await s.wait_state("PreparingRebalance", group, members=count)
    return parked


def note_generation(s: Sequence, answers: dict[str, Tree]) -> None:
    """Remember the generation's members (for the leader condition) from the leader's answer."""
    for a in answers.values():
        if a["error_code"] == 0 and a.get("members"):
            s.notes["generation_members"] = [m["member_id"] for m in a["members"]]
            s.notes["leader"] = a["leader"]


async def sync(s: Sequence, answers: dict[str, Tree], version: int = 5, group: str = "g",
               statics: dict[str, str] | None = None) -> dict[str, Tree]:
    """Every member that joined syncs at once; each server's own leader sends the assignment
    (each member's logical name, so both servers hand out the same bytes)."""
    statics = statics or {}
    calls = []
    for who, a in answers.items():
        if a["error_code"] != 0:
            continue
        calls.append((who, _sync_builder(version, group, who, a, statics.get(who))))
    if not calls:
        return {}
    out = await s.step(*calls)
    return dict(zip([c[0] for c in calls], out, strict=True))


def _sync_builder(version: int, group: str, who: str, answer: Tree, instance: str | None
                  ) -> h.Builder:
    def build(side: h.Side) -> Any:
        mine = side.last_join.get(who, answer)
        assignments = None
        if mine.get("members"):  # only the leader is told the members
            ids = {token: actual for actual, token in side.tokens.items()}
            assignments = {"=" + ids[m["member_id"]]: f"assignment-{m['member_id']}".encode()
                           for m in mine["members"]}
        return h.sync(version, group, who, generation=mine["generation_id"], instance=instance,
                      assignments=assignments, protocol_name=mine.get("protocol_name") or "range"
                      )(side)

    return build
