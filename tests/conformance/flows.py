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
    """`whos` join one generation, in an order both servers see alike. New dynamic members first
    get their ids (MEMBER_ID_REQUIRED, v4+: no rebalance yet). whos[0] then starts the join phase;
    the others are sent once both servers are in PreparingRebalance, so none of them lands in a
    Stable or CompletingRebalance group. In an empty group whos[0] completes a generation alone
    (the initial delay is 0), the others then start the next phase and whos[0] rejoins it.
    Every member's join must start or join a rebalance (a new member, the leader, changed
    metadata, or a group already rebalancing). Returns each member's final JoinGroup answer."""
    statics = statics or {}

    def call(who: str) -> tuple[str, h.Builder]:
        return who, h.join(version, group, who, instance=statics.get(who), **kw)

    new = [w for w in whos if not s.kafka.mid(w) and w not in statics]
    if version >= 4 and new:
        await s.step(*(call(w) for w in new))
    first, rest = whos[0], whos[1:]
    if not rest:
        return {first: (await s.step(call(first)))[0]}
    if await s.state(group) in ("Empty", "Dead"):
        await s.step(call(first))
        parked = await s.send(*(call(w) for w in rest))
        await s.wait_state("PreparingRebalance", group)
        answers = await s.receive(parked, await s.send(call(first)))
        return dict(zip([*rest, first], answers, strict=True))
    parked = await s.send(call(first))
    await s.wait_state("PreparingRebalance", group)
    answers = await s.receive(parked, await s.send(*(call(w) for w in rest)))
    return dict(zip(whos, answers, strict=True))


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
            assignments = {side.who(m["member_id"]): f"assignment-{side.who(m['member_id'])}"
                           .encode() for m in mine["members"]}
        return h.sync(version, group, who, generation=mine["generation_id"], instance=instance,
                      assignments=assignments, protocol_name=mine.get("protocol_name") or "range"
                      )(side)

    return build
