"""KIP-848 groups of 8 and 100 real clients (issue 38): librdkafka (confluent-kafka) and the Java
client (kafka-clients 4.4), group.protocol=consumer, against a standalone groupcoord and through a
fleet of three sidecars.

The members of a size run in one driver process, a thread each (a "swarm", tests/clients/common.py
`--members`): 100 processes would measure the machine, not the coordinator. Each member is still
its own consumer, with its own connections, member id and ConsumerGroupHeartbeat loop.

What each test shows, on a topic of two partitions per member:
- the members own every partition exactly once, two each (uniform: balanced), and
  ConsumerGroupDescribe agrees member for member, at one epoch (Stable, the assignment epoch at
  the group epoch);
- one more member joining moves only the partitions it is given: the swarm's members are revoked
  exactly as many partitions as the newcomer ends up owning (sticky: no partition moves between
  members that were already there);
- in a fleet, the three sidecars describe the same group (epochs and assignments), whichever of
  them each member's heartbeats go through.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.clients.test_clients_consumer_protocol import (
    CONSUMER_OPTIONS,
    owned_by_member,
    revoked_since,
    wait_split,
)
from tests.sidecar.test_fleet import settled
from tests.sidecar.test_fleet_consumer_protocol import describe as describe_through
from tests.support import realclients as rc
from tests.support.sidecar_util import Stack, Upstream, create_topic, stack, upstream

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]

TOPIC = "kip848-scale"
# A 30 s session timeout: a JVM starting 100 consumers on a shared 2-core machine can miss 4 s of
# heartbeats, and a fenced Java member's next OffsetFetch throws UnknownMemberIdException out of
# poll() (seen at load average 11).
OPTIONS = {**CONSUMER_OPTIONS, "consumer_session_timeout_ms": 30_000}
FLEET_ARGS = ("--consumer-heartbeat-interval-ms", "500", "--consumer-session-timeout-ms", "30000")
# A hundred members (one or three JVMs, 100 consumer threads) load the whole machine: under
# `make test`'s two workers these run one after another on one worker (tests/conftest.py,
# "parallel runs"), never two at once.
SIZES = [pytest.param(8, id="8"),
         pytest.param(100, id="100", marks=pytest.mark.xdist_group("heavy"))]


def _kinds() -> list[Any]:
    return rc.kind_params(("confluent", "java"))


def _options(group: str, topic: str, bootstrap: str) -> dict[str, Any]:
    return {"bootstrap": bootstrap, "group": group, "topic": topic, "assignors": ["uniform"],
            "group_protocol": "consumer"}  # fmt: skip


def _deadline(n: int) -> float:
    return 30 + n * 0.6  # a JVM starting 100 consumers on a shared 2-core machine


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", _kinds())
async def test_a_swarm_forms_one_balanced_group_and_a_newcomer_moves_only_its_share(
    request: Any, server: Any, swarms: Any, members: Any, kind: str, n: int
) -> None:
    rc.require_kind(request, kind)
    partitions = 2 * n
    broker = server(topics={TOPIC: partitions}, **OPTIONS)
    group = f"kip848-scale-{kind}-{n}"
    swarm = await swarms(kind, kind, n, **_options(group, TOPIC, broker.bootstrap))
    described = await wait_split(broker, group, swarm.members, partitions, _deadline(n))
    assert described.assignor_name == "uniform"
    assert described.assignment_epoch == described.group_epoch
    assert {m.client_id for m in described.members} == {m.name for m in swarm.members}
    assert {len(m.owned or ()) for m in swarm.members} == {2}, "uniform: two each"

    t = time.monotonic()
    late = await members(kind, f"{kind}-late", **_options(group, TOPIC, broker.bootstrap))
    everyone = [*swarm.members, late]
    await wait_split(broker, group, everyone, partitions, _deadline(8))
    moved = sum(len(revoked_since(m, t)) for m in swarm.members)
    assert late.owned and moved == len(late.owned), (moved, sorted(late.owned or ()))
    sizes = sorted(len(m.owned or ()) for m in everyone)
    assert sizes[-1] - sizes[0] <= 1, sizes


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", _kinds())
async def test_a_swarm_spread_over_a_fleet_of_three_is_one_group(
    stack: Stack, upstream: Upstream, swarms: Any, request: Any, kind: str, n: int
) -> None:
    rc.require_kind(request, kind)
    sidecars = [stack.sidecar(upstream.bootstrap, *FLEET_ARGS, fleet=True) for _ in range(3)]
    await settled(stack, sidecars)
    topic, partitions = upstream.name(TOPIC), 2 * n
    await create_topic(upstream.bootstrap, topic, partitions)
    group = "fleet-consumers"  # the name describe_through asks for; the fleet group is unique
    shares = [n // 3 + (i < n % 3) for i in range(3)]
    crowd: list[rc.Member] = []
    for i, (s, size) in enumerate(zip(sidecars, shares, strict=True)):
        swarm = await swarms(kind, f"{kind}-s{i}", size, **_options(group, topic, s.bootstrap))
        crowd += swarm.members
    seen: list[Any] = []

    async def one_stable_group() -> bool:
        if not (rc.partition_of(crowd, partitions) and all(m.member_id for m in crowd)):
            return False
        views = [await describe_through(s) for s in sidecars]
        said = {m.member_id: m.owned for m in crowd}
        seen[:] = [(v.error_code, v.group_state, v.group_epoch, v.assignment_epoch) for v in views]
        return all(
            v.error_code == 0
            and v.group_state == "Stable"
            and v.assignment_epoch == v.group_epoch
            and owned_by_member(v) == said
            for v in views
        ) and len({(v.group_epoch, tuple(sorted(owned_by_member(v)))) for v in views}) == 1

    # Twice the single server's deadline: 100 librdkafka members through a fleet on Kafka took 5 s
    # alone but ran past 120 s once beside the other test worker at load average 16-19.
    await rc.wait_until(
        one_stable_group, 2 * _deadline(n), f"one Stable group of {n} across the fleet",
        interval=0.3, explain=lambda: f"views: {seen}\n{stack.explain()}",
    )  # fmt: skip
    assert {len(m.owned or ()) for m in crowd} == {2}, "uniform: two each"

