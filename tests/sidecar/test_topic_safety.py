"""Sidecar mode: a topic, and its committed offsets, are deleted only when the deletion is certain
(issue 24, item 1), and /readyz means "the upstream answers" (item 2).

The defect these pin: an upstream restarted empty (tansu 0.6.0 keeps data in memory only; a
Kafka broker answering before its topics are loaded looks the same) was read as "every topic
deleted" within milliseconds of coming back, and every group's offsets went with them."""

from __future__ import annotations

import html
import urllib.request
from dataclasses import replace
from typing import Any

import pytest

from tests.support import realclients as rc
from tests.support.sidecar_util import (
    MetadataScript,
    Sidecar,
    Stack,
    Upstream,
    commit,
    create_topic,
    delete_topic,
    fetch,
    readyz,
    recreate_topic,
    stack,
    upstream,
)

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]

TOPIC, GROUPS, PARTITIONS = "t5", ("g5", "g6"), 3
OFFSETS = {0: 10, 1: 20, 2: 30}


def status_page(sidecar: Sidecar) -> str:
    url = f"http://127.0.0.1:{sidecar.metrics_port}/"
    with urllib.request.urlopen(url, timeout=5) as response:
        return html.unescape(response.read().decode())


async def committed_topic(
    stack: Stack, up: Upstream, *flags: str, via_sidecar: bool = False
) -> tuple[str, Sidecar]:
    """A sidecar (with `flags`) in front of the upstream, the topic created (through the sidecar
    or straight upstream) and seen by the sidecar, and OFFSETS committed for every group:
    -> (the topic's name, the sidecar)."""
    topic = up.name(TOPIC)
    sidecar = stack.sidecar(up.bootstrap, *flags)
    await create_topic(sidecar.bootstrap if via_sidecar else up.bootstrap, topic, PARTITIONS)
    await rc.wait_until(lambda: f"upstream topic {topic} has" in sidecar.log(), 10,
                        "the sidecar to see the topic")
    for group in GROUPS:
        assert await commit(sidecar.port, group, topic, OFFSETS) == 0
    return topic, sidecar


async def offsets_gone(port: int, topic: str = TOPIC) -> bool:
    """Every group's offsets of the topic deleted (OffsetFetch answers -1)."""
    return await committed_everywhere(port, topic) == dict.fromkeys(
        GROUPS, dict.fromkeys(range(PARTITIONS), -1)
    )


async def committed_everywhere(port: int, topic: str = TOPIC) -> dict[str, dict[int, int] | int]:
    return {g: await fetch(port, g, topic, PARTITIONS) for g in GROUPS}


async def test_an_upstream_restarted_empty_deletes_no_offsets(stack: Stack) -> None:
    """tansu only: its upstream is killed and restarted empty (which the shared Kafka must not
    be; a relay would not do: the sidecar reaches the brokers that Metadata names)."""
    tansu = stack.tansu()
    sidecar = stack.sidecar(tansu.bootstrap)  # the default delay before a deletion: 60 s
    await create_topic(sidecar.bootstrap, TOPIC, PARTITIONS)
    await rc.wait_until(lambda: TOPIC in sidecar.log(), 10, "the sidecar to see the topic")
    for group in GROUPS:
        assert await commit(sidecar.port, group, TOPIC, OFFSETS) == 0
    before = await committed_everywhere(sidecar.port)
    assert before == dict.fromkeys(GROUPS, OFFSETS)
    assert readyz(sidecar)[0] == 200

    tansu.kill()  # the upstream goes away: not ready, and nothing is deleted
    await rc.wait_until(lambda: readyz(sidecar)[0] == 503, 10, "/readyz to say unreachable")
    _, why = readyz(sidecar)
    assert "upstream unreachable" in why, why
    assert sidecar.upstream()["state"] == "unreachable"
    page = status_page(sidecar)  # the status page says so too, and why
    assert f"upstream {tansu.bootstrap}: unreachable (" in page and "not ready: upstream" in page
    stack.tansu(port=tansu.port)  # ... and comes back empty, on the same address

    await rc.wait_until(lambda: readyz(sidecar)[0] == 200, 15, "/readyz to say ready again")
    absent_from = sidecar.upstream()["refreshes"]

    def many_refreshes_without_it() -> bool:
        view = sidecar.upstream()
        return view["topics_absent"] == [TOPIC] and view["refreshes"] >= absent_from + 10

    # Ten complete answers lacking the topic (the old rule deleted after two, 3 ms apart).
    await rc.wait_until(many_refreshes_without_it, 15, "ten refreshes without the topic")
    assert await committed_everywhere(sidecar.port) == before, sidecar.log()
    assert "topic t5 deleted" not in sidecar.log()


async def test_a_topic_deleted_through_the_sidecar_takes_its_offsets_at_once(
    stack: Stack, upstream: Upstream
) -> None:
    topic, sidecar = await committed_topic(stack, upstream, via_sidecar=True)

    await delete_topic(sidecar.bootstrap, topic)  # DeleteTopics passes through: certain

    await rc.wait_until(
        lambda: offsets_gone(sidecar.port, topic), 10, "the offsets to be deleted with the topic"
    )
    assert f"topic {topic} deleted: 6 committed offsets of 2 groups deleted with it" in (
        sidecar.log())


async def test_a_topic_absent_upstream_for_the_whole_delay_takes_its_offsets(
    stack: Stack, upstream: Upstream
) -> None:
    """Deleted straight on the upstream (no DeleteTopics passes through): the topic goes once it
    has been absent from complete refreshes for --upstream-topic-delete-after-ms."""
    topic, sidecar = await committed_topic(stack, upstream, "--upstream-topic-delete-after-ms",
                                           "1500")  # fmt: skip

    await delete_topic(upstream.bootstrap, topic)
    await rc.wait_until(
        lambda: sidecar.upstream()["topics_absent"] == [topic], 10, "the topic to be absent"
    )
    assert await committed_everywhere(sidecar.port, topic) == dict.fromkeys(GROUPS, OFFSETS)

    await rc.wait_until(
        lambda: offsets_gone(sidecar.port, topic), 15, "the offsets to be deleted after the delay"
    )
    line = next(x for x in sidecar.log().splitlines() if "absent from" in x)
    seconds = float(line.split(" over ")[1].split(" s")[0])
    assert seconds >= 1.5, line
    assert sidecar.upstream()["topics_absent"] == []


async def test_a_topic_recreated_upstream_under_a_new_id_takes_its_offsets(
    stack: Stack, upstream: Upstream
) -> None:
    """A new topic id under a known name is a deletion and a creation (Metadata v10+ ids), as
    with Kafka: the old topic's offsets do not carry over to the new one."""
    topic, sidecar = await committed_topic(stack, upstream, "--upstream-topic-delete-after-ms",
                                           "600000")  # fmt: skip

    await recreate_topic(upstream.bootstrap, topic, PARTITIONS)

    await rc.wait_until(
        lambda: offsets_gone(sidecar.port, topic), 15, "the old topic's offsets to be deleted"
    )
    assert "re-created (new topic id)" in sidecar.log()


# -- the two rules of "certain", against a scripted upstream: tansu behind a relay that rewrites
# the Metadata answers the sidecar's refreshes get (every Metadata in these tests is a refresh).


def without_topic(response: Any) -> Any:
    return replace(response, topics=tuple(t for t in response.topics if t.name != TOPIC))


def naming_no_broker(response: Any) -> Any:
    """What a broker that is starting up may answer: no brokers, no topics."""
    return replace(response, brokers=(), topics=())


def unchanged(response: Any) -> Any:
    return response


async def scripted_upstream(stack: Stack) -> tuple[MetadataScript, Sidecar]:
    """tansu advertising a scripted relay, a sidecar in front of it that deletes a vanished
    topic's offsets as soon as the rules allow (--upstream-topic-delete-after-ms 0), the topic
    seen and OFFSETS committed for every group."""
    port = rc.free_port()
    tansu = stack.tansu(advertised=port)
    relay = await stack.relay(tansu.port, port, kind=MetadataScript)
    assert isinstance(relay, MetadataScript)
    sidecar = stack.sidecar(f"127.0.0.1:{port}", "--upstream-topic-delete-after-ms", "0")
    await create_topic(tansu.bootstrap, TOPIC, PARTITIONS)
    await rc.wait_until(lambda: TOPIC in sidecar.log(), 10, "the sidecar to see the topic")
    for group in GROUPS:
        assert await commit(sidecar.port, group, TOPIC, OFFSETS) == 0
    return relay, sidecar


async def play(relay: MetadataScript, *edits: Any) -> None:
    """The next refreshes get `edits`, one each; returns once all were answered."""
    relay.script.extend(edits)
    await rc.wait_until(lambda: not relay.script, 15, "the script to be played")


async def test_one_refresh_without_a_topic_is_not_enough_to_delete_its_offsets(
    stack: Stack,
) -> None:
    relay, sidecar = await scripted_upstream(stack)

    # One complete refresh lacks the topic, then it is back (same id) for two more.
    await play(relay, without_topic, unchanged, unchanged)
    assert await committed_everywhere(sidecar.port) == dict.fromkeys(GROUPS, OFFSETS), (
        sidecar.log())
    assert "upstream topic t5 is back; its offsets were kept" in sidecar.log()

    # Two complete refreshes in a row lack it: with no delay to wait out, now it is certain.
    await play(relay, without_topic, without_topic)
    await rc.wait_until(lambda: offsets_gone(sidecar.port), 10, "the offsets to be deleted")
    assert "upstream topic t5 absent from 2 refreshes" in sidecar.log()


async def test_an_answer_naming_no_broker_is_not_a_complete_refresh(stack: Stack) -> None:
    relay, sidecar = await scripted_upstream(stack)

    await play(relay, *[naming_no_broker] * 5, unchanged, unchanged)
    assert await committed_everywhere(sidecar.port) == dict.fromkeys(GROUPS, OFFSETS), (
        sidecar.log())
    assert "upstream topic t5 absent" not in sidecar.log()  # not even gone for the clients
