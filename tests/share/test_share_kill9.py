"""kill -9 of groupcoord under a share consumer, mid-stream: what was acknowledged stays so.

A share member consumes through the sidecar and commits its acknowledgements batch by batch
(commitSync); groupcoord is killed -9 part way: the single sidecar with --state local (restarted
on the same port and data directory), or the owner of the group in a two-member fleet (the
survivor takes over). Afterwards no record whose acknowledgement the member saw committed is
delivered again, and every other record is delivered (again) until all are accepted: the share
state is durable before ShareAcknowledge answers, as offsets are before OffsetCommit answers.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.share.conftest import Target, share_client
from tests.sidecar.test_fleet import fleet, owner_of
from tests.sidecar.test_txn_offsets import restart_sidecar
from tests.support import realclients as rc
from tests.support import share_util as su
from tests.support.sidecar_util import Stack, Upstream, create_topic, upstream

pytestmark = [pytest.mark.clients, pytest.mark.deadline(240)]
__all__ = ["upstream"]

RECORDS = 1000
LOCK_MS = 5000  # the holder's records come back by then, whatever the kill did to the locks


def committed_before(m: rc.Member, t: float) -> set[tuple[int, int]]:
    """The records the member accepted and then saw committed without error, before time t."""
    done: set[tuple[int, int]] = set()
    pending: set[tuple[int, int]] = set()
    for e in m.events:
        if e["t"] >= t:
            break
        if e["event"] == "records":
            pending |= {(p, o) for p, o, _, action in e["records"] if action == "accept"}
        elif e["event"] == "committed":
            if not e["errors"]:
                done |= pending
            pending = set()
    return done


# One client per mode keeps the run short; both clients run every step in test_share_groups.py.
@pytest.mark.parametrize(("mode", "kind"), [
    pytest.param("local", "confluent", id="local-confluent"),
    pytest.param("fleet", "java", marks=pytest.mark.java, id="fleet-java")])
async def test_kill_9_mid_stream_redelivers_only_what_was_not_acknowledged(
    request: pytest.FixtureRequest, stack: Stack, upstream: Upstream, tmp_path: Path, mode: str,
    kind: str
) -> None:
    share_kind = share_client(request, kind)
    sidecars = ([stack.sidecar(upstream.bootstrap)] if mode == "local"
                else await fleet(stack, upstream.bootstrap, 2))
    bootstrap = ",".join(s.bootstrap for s in sidecars)
    topic = group = upstream.name(f"share-kill9-{mode}")
    await Target("sidecar", upstream, sidecars[0]).check()
    await create_topic(upstream.bootstrap, topic, 1)
    su.set_group_configs(bootstrap, group, {**su.BASE_CONFIGS,
                                            "share.record.lock.duration.ms": str(LOCK_MS)})

    async def member(name: str) -> rc.Member:
        m = await su.start_share_member(tmp_path, stack.peers, share_kind, name,
                                        bootstrap=bootstrap, group=group, topic=topic,
                                        max_poll_records=100)
        stack.members.append(m)
        return m

    # A holder acquires the first records and never acknowledges them: in flight at the kill.
    holder = await member("holder")
    await su.wait_members_assigned(sidecars[0].port, group, topic, 1, [holder])
    await su.tell(holder, "hold")
    su.produce_numbered(upstream.bootstrap, topic, RECORDS)
    await rc.wait_until(lambda: any(e["event"] == "holding" for e in holder.events), 60,
                        "the holder to acquire records", explain=lambda: su.explain([holder]))
    held = {(d.partition, d.offset) for d in su.deliveries(holder)}
    m = await member("survivor")
    await su.wait_deliveries([m], lambda ds: len(su.accepted(ds)) >= RECORDS // 4, 60,
                             "a quarter of the records accepted")
    # ... and some of them acknowledged by the broker (a commit answered), not only accepted by
    # the client: on a loaded machine the kill can otherwise come before the first commit's answer.
    await rc.wait_until(lambda: committed_before(m, time.monotonic()), 60,
                        "a commit of accepted records answered", explain=lambda: su.explain([m]))
    victim = sidecars[0] if mode == "local" else owner_of(stack, group, sidecars)
    assert victim is not None, stack.explain()
    killed_at = time.monotonic()
    if mode == "local":
        restart_sidecar(stack, victim)
    else:
        victim.kill()
    before = committed_before(m, killed_at)
    assert before, "nothing was acknowledged before the kill: the test proves nothing"
    everything = {(0, o) for o in range(RECORDS)}
    await su.wait_accepted([m], everything, 60, f"all {RECORDS} records accepted after the kill")
    again = {(p, o) for e in m.events if e["t"] > killed_at and e["event"] == "records"
             for p, o, *_ in e["records"]}
    assert not again & before, f"acknowledged, then delivered again: {sorted(again & before)[:10]}"
    assert held <= {(d.partition, d.offset) for d in su.deliveries(m) if d.action == "accept"}, (
        "a record in flight at the kill was not delivered again")
    await su.close_all([m, holder])
