"""Real clients over real sockets: mixed groups, leaving, dying, static members, rolling upgrade.

Issue 2, "Tests that must pass" (real clients). Timing assertions allow a slack for process start-up
and client back-off, but each one would fail if the coordinator reacted at the wrong time: a killed
member's partitions move only after its session timeout, a cleanly closed one's well before it.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tests.support.realclients import (
    PARTITIONS,
    assert_stable_and_described,
    describe_confluent,
    explain_members,
    kind_params,
    partition_of,
    require_kind,
    wait_until,
)

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
async def test_mixed_python_clients_share_a_group(server, members, assignor):
    broker = server(topics={"orders": PARTITIONS})
    group = f"mixed-{assignor}"
    ms = [await members(kind, f"{kind}-m", bootstrap=broker.bootstrap, group=group,
                        topic="orders", assignors=[assignor])
          for kind in ("aiokafka", "kafka-python", "confluent")]
    view = await assert_stable_and_described(broker, group, ms)
    assert view.protocol == assignor
    assert all(len(m.owned) == 4 for m in ms), [sorted(m.owned) for m in ms]
    if assignor == "roundrobin":
        # Round robin over one topic deals partitions out in turn: each member's are 3 apart.
        for m in ms:
            owned = sorted(m.owned)
            assert {b - a for a, b in itertools.pairwise(owned)} == {3}, owned


@pytest.mark.parametrize("kind", kind_params())
async def test_clean_close_hands_partitions_over(request, server, members, kind):
    require_kind(request, kind)
    broker = server(topics={"orders": PARTITIONS})
    group = f"close-{kind}"
    # A session far longer than the (generous) wait below: a takeover within the wait can only
    # come from the LeaveGroup, never from the leaver's session running out.
    session_ms, wait_s = 300_000, 60
    ms = [await members(kind, f"{kind}-{i}", bootstrap=broker.bootstrap, group=group,
                        topic="orders", session_timeout_ms=session_ms)
          for i in range(3)]
    await assert_stable_and_described(broker, group, ms)
    leaving, survivors = ms[0], ms[1:]
    await leaving.close()
    assert leaving.proc.returncode == 0, leaving.log_tail()
    # LeaveGroup makes the coordinator rebalance now, not after the 300 s session timeout.
    await wait_until(lambda: partition_of(survivors, PARTITIONS), wait_s,
                     "the survivors to take over the leaver's partitions (LeaveGroup), well "
                     "before its session timeout",
                     explain=lambda: explain_members(ms, broker))
    await assert_stable_and_described(broker, group, survivors)


@pytest.mark.parametrize("kind", kind_params())
async def test_killed_member_expires_after_session_timeout(request, server, members, kind):
    require_kind(request, kind)
    broker = server(topics={"orders": PARTITIONS})
    group = f"kill-{kind}"
    session_ms, heartbeat_ms = 6000, 500
    ms = [await members(kind, f"{kind}-{i}", bootstrap=broker.bootstrap, group=group,
                        topic="orders", session_timeout_ms=session_ms,
                        heartbeat_interval_ms=heartbeat_ms)
          for i in range(3)]
    await assert_stable_and_described(broker, group, ms)
    victim, survivors = ms[0], ms[1:]
    orphaned = set(victim.owned)
    t0 = time.monotonic()
    victim.kill()
    await victim.proc.wait()
    await wait_until(lambda: partition_of(survivors, PARTITIONS), session_ms / 1000 + 20,
                     "the survivors to take over the killed member's partitions",
                     explain=lambda: explain_members(ms, broker))
    # Nothing moved before the session timeout: the last heartbeat was at most one interval before
    # the kill, and a closed TCP connection is not a LeaveGroup (Kafka keeps the member).
    earliest_s = (session_ms - heartbeat_ms) / 1000 - 1.0
    reactions = [(e["t"] - t0, s.name, e["event"]) for s in survivors for e in s.events_since(t0)]
    assert reactions, "survivors saw no rebalance"
    first = min(reactions)
    assert first[0] >= earliest_s, (
        f"rebalance {first[0]:.2f}s after the kill, before the {session_ms} ms session timeout: "
        f"{sorted(reactions)}")
    assert orphaned <= set().union(*(s.owned for s in survivors))
    await assert_stable_and_described(broker, group, survivors)


@pytest.mark.parametrize("kind", kind_params(("java", "aiokafka", "kafka-python", "confluent")))
async def test_static_member_restart_keeps_partitions_and_generation(request, server, members,
                                                                     kind):
    require_kind(request, kind)
    broker = server(topics={"orders": PARTITIONS})
    group = f"static-{kind}"
    session_ms = 15_000  # room for a restart (a JVM's start included) on a loaded machine
    opts = {"bootstrap": broker.bootstrap, "group": group, "topic": "orders",
            "session_timeout_ms": session_ms}
    a = await members(kind, f"{kind}-a", instance_id="instance-a", **opts)
    b = await members(kind, f"{kind}-b", instance_id="instance-b", **opts)
    await assert_stable_and_described(broker, group, [a, b])
    before_owned, before_generation = a.owned, a.generation
    b_generation = b.generation
    t0 = time.monotonic()
    a.kill()
    await a.proc.wait()
    a2 = await members(kind, f"{kind}-a2", instance_id="instance-a", **opts)
    await wait_until(lambda: a2.owned is not None, session_ms / 1000 + 30,
                     "the restarted static member to get an assignment",
                     explain=lambda: explain_members([a2, b], broker))
    # It came back as the same member: its old partitions, no rebalance for anyone (had the
    # restart outlasted the session, the old incarnation would have expired and b rebalanced).
    assert not b.events_since(t0), (
        f"the other static member rebalanced at the restart: {b.events_since(t0)}\n"
        f"{explain_members([a2, b], broker)}")
    assert a2.owned == before_owned
    if kind != "confluent":  # librdkafka's binding does not expose the generation
        assert before_generation is not None
        assert a2.generation == before_generation, (before_generation, a2.generation)
    # The other member never rebalances: not at the rejoin, and not when the old incarnation's
    # session would have run out (the replaced member id must not expire and trigger a rebalance).
    deadline = t0 + session_ms / 1000 + 2.0

    async def quiet_until_deadline():
        assert not b.events_since(t0), f"the other static member rebalanced: {b.events_since(t0)}"
        return time.monotonic() >= deadline

    await wait_until(quiet_until_deadline, session_ms / 1000 + 5, "the old session to lapse",
                     interval=0.2, explain=lambda: explain_members([a2, b], broker))
    assert b.generation == b_generation
    view = await asyncio.to_thread(describe_confluent, broker.bootstrap, group)
    assert view.state == "STABLE"
    assert view.members == {a2.member_id: before_owned, b.member_id: b.owned}


def _is_roundrobin(ms) -> bool:
    return all(len({p % len(ms) for p in m.owned}) == 1 for m in ms if m.owned)


def _is_range(ms) -> bool:
    return all(max(m.owned) - min(m.owned) + 1 == len(m.owned) for m in ms if m.owned)


@pytest.mark.parametrize("kind", kind_params(("confluent", "java")))
async def test_rolling_upgrade_switches_protocol_when_all_prefer_roundrobin(request, server,
                                                                            members, kind):
    """Seed 000: the protocol every member lists, most preferred by votes; range until all move."""
    require_kind(request, kind)
    broker = server(topics={"orders": PARTITIONS})
    group = f"rolling-{kind}"
    opts = {"bootstrap": broker.bootstrap, "group": group, "topic": "orders"}
    new = ["roundrobin", "range"]
    a = await members(kind, f"{kind}-a", assignors=new, **opts)
    b = await members(kind, f"{kind}-b", assignors=["range"], **opts)
    c = await members(kind, f"{kind}-c", assignors=["range"], **opts)

    async def protocol_is(ms, protocol, pattern):
        view = await assert_stable_and_described(broker, group, ms)
        assert view.protocol == protocol, (view.protocol, [sorted(m.owned) for m in ms])
        assert pattern(ms), (protocol, [sorted(m.owned) for m in ms])

    await protocol_is([a, b, c], "range", _is_range)
    # Upgrade b: [roundrobin, range] beside c's [range] still yields range.
    await b.close()
    b2 = await members(kind, f"{kind}-b2", assignors=new, **opts)
    await protocol_is([a, b2, c], "range", _is_range)
    # Upgrade c: now every member lists roundrobin first, so the group switches.
    await c.close()
    c2 = await members(kind, f"{kind}-c2", assignors=new, **opts)
    await protocol_is([a, b2, c2], "roundrobin", _is_roundrobin)
