"""Kafka's own kafka-consumer-groups.sh (ConsumerGroupCommand, kafka-tools 4.4) against groupcoord,
compared with the same tool against Apache Kafka for the same groups built by the same steps.

The steps (`exercise`): a classic group (one aiokafka member) and a KIP-848 consumer group (one
Java member, group.protocol=consumer) on a 3-partition topic, each committing offset 2 on every
partition; then, while they are Stable, --list (bare, with --state and --type), --describe with
--members, --offsets and --state (each with and without --verbose), a refused reset and a refused
delete; the members leave, and on the Empty groups: --describe again, --reset-offsets dry runs
(--to-earliest, --to-latest, --to-offset, --shift-by, --to-current --export) and --execute
(--to-offset, --shift-by, --to-earliest, --from-file of the export), --delete-offsets,
--delete, and --describe of the deleted groups.

Every output is compared whole, stdout, stderr and exit code, after `normalise` replaces what
differs between two runs by nature: the group and topic names (unique on the shared Kafka), member
ids (random), the coordinator's address and node id. Nothing else is allowed to differ.

Standalone, groupcoord stores no records, so Kafka's topic is left empty too (log end 0); in
front of Kafka (sidecar mode) both sides read the same records from the same Kafka. Tansu is not
an upstream here: its ListOffsets answers are not Kafka's, so the tool's LOG-END-OFFSET would
differ for a reason outside groupcoord.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import realclients as rc
from tests.support.kafka import unique
from tests.support.kafka_tools import CONSUMER_GROUPS, KafkaTools, Result, tool_classes, tools
from tests.support.sidecar_util import Stack, create_topic, produce, stack

__all__ = ["stack", "tool_classes", "tools"]  # the fixtures

pytestmark = pytest.mark.clients

PARTITIONS = 3
COMMITTED = 2
StartMember = Callable[..., Awaitable[rc.Member]]


class Target:
    """One cluster the steps run on: where the tool and the clients connect, and the names (the
    same on both sides, so that the tool's own hash-ordered output, e.g. --delete's list of
    groups, comes out in the same order)."""

    def __init__(self, label: str, bootstrap: str, topic: str, names: tuple[str, str],
                 tmp: Path) -> None:
        self.label, self.bootstrap, self.topic, self.tmp = label, bootstrap, topic, tmp
        self.classic, self.consumer = names


def names() -> tuple[str, str]:
    return unique("kcg-classic"), unique("kcg-consumer")


def normalise(target: Target, text: str) -> str:
    """What differs between two runs by nature, replaced by placeholders (module docstring)."""
    text = text.replace(target.classic, "<classic>").replace(target.consumer, "<consumer>")
    text = re.sub(rf"\b{re.escape(target.topic)}\b", "<topic>", text)
    text = text.replace("COORDINATOR (ID)", "COORDINATOR(ID)")
    text = re.sub(r"\b127\.0\.0\.1:\d+\s*\(\d+\)", "<coordinator>", text)
    ids: dict[str, str] = {}
    # classic member ids: client id + '-' + a UUID; KIP-848 member ids: 22 base64url chars
    pattern = r"\b(c1-[0-9a-f]{8}-[0-9a-f-]{27}|[A-Za-z0-9_-]{22})(?=\s)"
    text = re.sub(pattern, lambda m: ids.setdefault(m.group(1), f"<member{len(ids)}>"), text)
    # Kafka pads columns to the longest cell: compare the cells, not the padding.
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return "\n".join(lines)


async def exercise(tools: KafkaTools, target: Target, members: StartMember,
                   ) -> list[tuple[str, Result]]:
    """The steps of the module docstring; every tool run, as (command, result)."""
    outputs: list[tuple[str, Result]] = []
    boot = ("--bootstrap-server", target.bootstrap)
    target.tmp.mkdir()

    async def tool(*args: str) -> Result:
        result = await tools.arun(CONSUMER_GROUPS, *boot, *args)
        outputs.append((" ".join(args), result))
        return result

    classic = await members("aiokafka", "c1", bootstrap=target.bootstrap, group=target.classic,
                            topic=target.topic)
    consumer = await members("java", "k1", bootstrap=target.bootstrap, group=target.consumer,
                             topic=target.topic, group_protocol="consumer")
    everything = frozenset(range(PARTITIONS))
    ms = [classic, consumer]
    await rc.wait_until(lambda: all(m.owned == everything for m in ms), 90,
                        f"{target.label}: each member to own the topic",
                        explain=lambda: rc.explain_members(ms))  # fmt: skip
    for m in ms:
        assert m.proc.stdin is not None
        m.proc.stdin.write(f"commit {COMMITTED}\n".encode())
        await m.proc.stdin.drain()
    await rc.wait_until(lambda: all(any(e["event"] == "committed" for e in m.events) for m in ms),
                        60, f"{target.label}: the commits", explain=lambda: rc.explain_members(ms))

    groups = (("--group", target.classic), ("--group", target.consumer))
    await tool("--list")
    await tool("--list", "--state")
    await tool("--list", "--type")
    await tool("--list", "--state", "Stable", "--type", "consumer")
    await tool("--list", "--state", "Empty")
    for group in groups:
        for view in ("--members", "--offsets", "--state"):
            await tool("--describe", *group, view)
            await tool("--describe", *group, view, "--verbose")
        await tool("--reset-offsets", *group, "--topic", target.topic, "--to-earliest")
        await tool("--delete", *group)

    for m in ms:
        await m.close()
    for group in groups:
        async def empty(group: tuple[str, str] = group) -> bool:
            described = await tools.arun(CONSUMER_GROUPS, *boot, "--describe", *group, "--state")
            return " Empty " in described.stdout

        await rc.wait_until(empty, 30, f"{target.label}: {group[1]} to be Empty")
    for group in groups:
        await tool("--describe", *group)
        await tool("--describe", *group, "--members", "--verbose")
        await tool("--describe", *group, "--state", "--verbose")
        scope = ("--topic", target.topic)
        for scenario in (("--to-earliest",), ("--to-latest",), ("--to-offset", "1"),
                         ("--shift-by", "-1"), ("--to-offset", "9")):
            await tool("--reset-offsets", *group, *scope, *scenario)
            await tool("--reset-offsets", *group, "--all-topics", *scenario, "--dry-run")
        await tool("--reset-offsets", *group, *scope, "--to-offset", "1", "--execute")
        await tool("--describe", *group, "--offsets")
        await tool("--reset-offsets", *group, f"--topic={target.topic}:0", "--shift-by", "1",
                   "--execute")
        await tool("--describe", *group, "--offsets", "--verbose")
        exported = await tool("--reset-offsets", *group, *scope, "--to-current", "--export",
                              "--dry-run")  # fmt: skip
        await tool("--reset-offsets", *group, *scope, "--to-earliest", "--execute")
        plan = target.tmp / f"{group[1]}.csv"
        plan.write_text(exported.stdout)
        await tool("--reset-offsets", *group, "--from-file", str(plan), "--execute")
        await tool("--describe", *group, "--offsets")
    await tool("--delete-offsets", *groups[0], "--topic", f"{target.topic}:0")
    await tool("--delete-offsets", *groups[1], "--topic", target.topic)
    await tool("--delete-offsets", *groups[1], "--topic", "no-such-topic")
    await tool("--describe", *groups[0], "--offsets")
    await tool("--delete", *groups[0], *groups[1])
    await tool("--describe", *groups[0])
    await tool("--delete", *groups[1])
    await tool("--list", "--state")
    return outputs


def ours(target: Target, lines: str) -> str:
    """--list on the shared Kafka shows every test's groups: keep the header and this run's, in
    name order (the order of ListGroups' answer is the coordinator's map order in Kafka; no
    client or tool may rely on it)."""
    keep = [line for line in lines.splitlines()
            if target.classic in line or target.consumer in line]
    head = [line for line in lines.splitlines()[:1] if line.startswith("GROUP ")]
    return "\n".join(head + sorted(keep))


def compare(ours_side: tuple[Target, list[tuple[str, Result]]],
            kafka_side: tuple[Target, list[tuple[str, Result]]]) -> None:
    mismatches = []
    for (command, got), (_, want) in zip(ours_side[1], kafka_side[1], strict=True):
        a = _view(ours_side[0], command, got)
        b = _view(kafka_side[0], command, want)
        if a != b:
            mismatches.append(f"$ kafka-consumer-groups.sh {normalise(ours_side[0], command)}\n"
                              f"--- groupcoord ---\n{a}\n--- kafka ---\n{b}")
    assert not mismatches, "\n\n".join(mismatches)


def _view(target: Target, command: str, result: Result) -> str:
    out = ours(target, result.stdout) if command.startswith("--list") else result.stdout
    return normalise(target, f"exit {result.returncode}\n{out}\n--- stderr ---\n{result.stderr}")


async def test_standalone_answers_kafka_consumer_groups_as_kafka_does(
    server: Any, kafka: Any, tools: KafkaTools, members: StartMember, tmp_path: Path,
) -> None:
    topic = unique("kcg")
    broker = server(topics={topic: PARTITIONS})
    await create_topic(kafka.bootstrap, topic, PARTITIONS)
    groups = names()
    ours_target = Target("groupcoord", broker.bootstrap, topic, groups, tmp_path / "ours")
    kafka_target = Target("kafka", kafka.bootstrap, topic, groups, tmp_path / "kafka")
    got = await exercise(tools, ours_target, members)
    want = await exercise(tools, kafka_target, members)
    compare((ours_target, got), (kafka_target, want))


async def test_sidecar_answers_kafka_consumer_groups_as_kafka_does(
    kafka: Any, stack: Stack, tools: KafkaTools, members: StartMember, tmp_path: Path,
) -> None:
    topic = unique("kcg-data")
    await create_topic(kafka.bootstrap, topic, PARTITIONS)
    await produce(kafka.bootstrap, topic, [f"k{i}" for i in range(20)])
    sidecar = stack.sidecar(kafka.bootstrap)
    groups = names()
    ours_target = Target("sidecar", sidecar.bootstrap, topic, groups, tmp_path / "ours")
    kafka_target = Target("kafka", kafka.bootstrap, topic, groups, tmp_path / "kafka")
    got = await exercise(tools, ours_target, members)
    want = await exercise(tools, kafka_target, members)
    compare((ours_target, got), (kafka_target, want))
