"""Generated classic-group sequences: a Hypothesis rule-based machine drives Kafka 4.4 and
groupcoord with the same steps (join, sync, heartbeat, leave, commit, fetch, describe, list),
its members drawn among two dynamic ones and a static one, at one client release's versions per
sequence; every answer is compared (harness.py). The machine only chooses steps whose timing is
the same on both servers: a rebalance always includes every current member (nobody is kicked out
by a timeout) and each joining member sends fresh metadata, so each join starts or joins the
rebalance.

Reproducible in CI: derandomized, no example database.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Coroutine
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.conformance import flows
from tests.conformance import harness as h
from tests.conformance.flows import SIBLINGS

# Examples x steps: sized so the whole conformance suite stays within a few minutes.
EXAMPLES = int(os.environ.get("CONFORMANCE_EXAMPLES", "300"))
STEPS = 15
MEMBERS = ("A", "B", "S")  # S is static (group.instance.id) from JoinGroup v5 on
REBALANCE_MS = 20_000  # never reached: every current member rejoins each rebalance


class ClassicMachine(RuleBasedStateMachine):
    env: h.Env

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.s = self.env.sequence()
        self.members: set[str] = set()  # in the group, as both servers see it
        self.unsynced: dict[str, h.Tree] = {}  # the last generation's join answers, not synced
        self.generation = -1
        self.metadata = 0
        self.version = 9

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.s.close()
        self.loop.close()

    @property
    def statics(self) -> dict[str, str]:
        return {"S": "inst-s"} if self.version >= 5 else {}

    @property
    def siblings(self) -> tuple[int, int, int]:
        return SIBLINGS[self.version]

    @initialize(version=st.integers(0, 9))
    def start(self, version: int) -> None:
        self.version = version

    # -- membership ----------------------------------------------------------------------------

    @rule(new=st.sets(st.sampled_from(MEMBERS)))
    def rebalance(self, new: set[str]) -> None:
        """Every current member rejoins, with the new ones; the first starts the phase."""
        joiners = sorted(self.members) + sorted(new - self.members)
        if not joiners:
            return
        self.metadata += 1
        meta = h.subscription("t1", "t2", user_data=str(self.metadata).encode())
        leader = self.s.notes.get("leader")
        self.s.notes["leader_left"] = leader is not None and not self._is_member_token(leader)
        answers = self.run(flows.join(self.s, joiners, self.version, statics=self.statics,
                                      rebalance_ms=REBALANCE_MS,
                                      protos=h.protocols("range", metadata=meta)))
        ok = {w: a for w, a in answers.items() if a.get("error_code") == 0}
        self.members = set(ok)
        flows.note_generation(self.s, ok)
        if ok:
            self.generation = int(next(iter(ok.values()))["generation_id"])
        self.unsynced = ok

    def _is_member_token(self, token: str) -> bool:
        return any(self.s.kafka.tokens.get(self.s.kafka.mid(w)) == token for w in self.members)

    @precondition(lambda self: bool(self.unsynced))
    @rule()
    def sync(self) -> None:
        self.run(flows.sync(self.s, self.unsynced, self.siblings[0], statics=self.statics))
        self.unsynced = {}

    @precondition(lambda self: bool(self.members))
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        who = data.draw(st.sampled_from(sorted(self.members)))
        lv = self.siblings[2]
        self.run(self.s.one(who, h.leave(lv, "g", (who, self.statics.get(who) if lv >= 3
                                                       else None))))
        self._forget(who)

    def _forget(self, who: str) -> None:
        self.members.discard(who)
        self.unsynced.pop(who, None)
        leader = self.s.notes.get("leader")
        if leader is not None and self.s.kafka.tokens.get(self.s.kafka.mid(who)) == leader:
            self.s.notes["leader_left"] = True
        for side in self.s.sides:  # it comes back as a new member
            side.member_ids.pop(who, None)

    # -- steps that change nothing but are answered by state -----------------------------------

    @rule(who=st.sampled_from(MEMBERS), stale=st.booleans())
    def heartbeat(self, who: str, stale: bool) -> None:
        generation = self.generation - 1 if stale else self.generation
        self.run(self.s.one(who, h.heartbeat(self.siblings[1], who=who, generation=generation,
                                             instance=self.statics.get(who))))

    @rule(who=st.sampled_from(MEMBERS), stale=st.booleans(),
          offsets=st.dictionaries(st.integers(0, 2), st.integers(0, 1000), min_size=1,
                                  max_size=3))
    def commit(self, who: str, stale: bool, offsets: dict[int, int]) -> None:
        generation = self.generation + 1 if stale else self.generation
        version = min(self.version + 2, 9)
        self.run(self.s.one(who, h.commit(version, who=who, generation=generation,
                                          offsets={"t1": offsets},
                                          instance=self.statics.get(who))))

    @rule()
    def fetch(self) -> None:
        self.run(self.s.one("X", h.offset_fetch(min(self.version + 1, 9),
                                                topics={"t1": [0, 1, 2]})))

    @rule()
    def describe(self) -> None:
        self.run(self.s.one("X", h.describe(min(self.version, 5))))

    @rule(states=st.sampled_from([(), ("Stable",), ("Empty", "CompletingRebalance")]))
    def list_groups(self, states: tuple[str, ...]) -> None:
        self.run(self.s.one("X", h.list_groups(5, states=states)))

    @invariant()
    def members_agree(self) -> None:
        """What the machine believes is what both servers answered (they were compared)."""
        assert all(self.s.kafka.mid(w) and self.s.groupcoord.mid(w) for w in self.members)


def test_generated_classic_sequences(env: h.Env) -> None:
    ClassicMachine.env = env
    started = time.monotonic()
    run_state_machine_as_test(ClassicMachine, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=True,
        database=None, suppress_health_check=list(HealthCheck)))
    print(f"{EXAMPLES} generated sequences in {time.monotonic() - started:.1f} s")
