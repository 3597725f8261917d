"""`groupcoord groups` as a Kafka user expects it, run as a user runs it (`python -m coordinator.cli
groups ...`) against a standalone server with a real KIP-848 member (the Java client,
group.protocol=consumer): describe through ConsumerGroupDescribe (members, epochs, current and
target assignments, offsets and lag), Kafka's invocation style (--list, --describe --group,
--reset-offsets, --delete), list's bare names, the dry-run warning in Kafka's words, the
negative-LAG and backward --to-latest warnings (standalone stores no records: every log ends at
0, so a committed offset 5 is past it), --to-current, and --export / --from-file in Kafka's CSV.

The same test runs against Apache Kafka 4.4 (the shared `kafka` fixture, an empty topic: its log
ends at 0 as well), so what the tool says of a KIP-848 group is what it says of Kafka's.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from coordinator.tools.groups import DRY_RUN_WARNING
from tests.support import ops_util
from tests.support import realclients as rc
from tests.support.kafka import unique
from tests.support.sidecar_util import create_topic

pytestmark = [pytest.mark.clients, pytest.mark.java]

PARTITIONS, COMMITTED = 3, 5


async def cli(*args: str) -> Any:
    """The CLI off the event loop, so the member driver's output keeps being read meanwhile."""
    return await asyncio.to_thread(ops_util.groupcoord_cli, "groups", *args)


def words(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("cluster", ["groupcoord", "kafka"])
async def test_a_kip848_group_through_kafka_style_commands(
    cluster: str, server: Any, members: Any, java_peers: Path, tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    if cluster == "kafka":
        bootstrap = request.getfixturevalue("kafka").bootstrap
        topic, group = unique("kstyle"), unique("kgroup")
        await create_topic(bootstrap, topic, PARTITIONS)
    else:
        topic, group = "t", "kgroup"
        bootstrap = server(topics={topic: PARTITIONS}).bootstrap
    boot = ("--bootstrap-server", bootstrap)
    m = await members("java", "k1", bootstrap=bootstrap, group=group, topic=topic,
                      group_protocol="consumer")
    await rc.wait_until(lambda: m.owned == frozenset(range(PARTITIONS)), 90,
                        "the member to own the topic", explain=lambda: rc.explain_members([m]))
    assert m.proc.stdin is not None
    m.proc.stdin.write(f"commit {COMMITTED}\n".encode())
    await m.proc.stdin.drain()
    await rc.wait_until(lambda: any(e["event"] == "committed" for e in m.events), 60,
                        "the commit", explain=lambda: rc.explain_members([m]))

    # list: bare names by default (Kafka's), Kafka's columns with --type/--state, ours with --table
    # (the shared Kafka lists every test's groups: only this one's rows are looked at)
    listed = await cli("--list", *boot)
    assert listed.returncode == 0 and group in listed.stdout.splitlines(), listed.stderr
    typed = await cli("--list", "--type", "--state", *boot)
    assert words(typed.stdout)[0] == ["GROUP", "TYPE", "STATE"]
    assert [group, "Consumer", "Stable"] in words(typed.stdout)
    empty_ones = words((await cli("list", "--state", "Empty", *boot)).stdout)
    assert empty_ones[0] == ["GROUP", "STATE"] and [group, "Stable"] not in empty_ones
    full = await cli("list", "--table", *boot)
    assert [group, "consumer", "Stable", "consumer"] in words(full.stdout)

    # describe: ConsumerGroupDescribe, not "does not exist"
    described = await cli("describe", group, "--json", *boot)
    assert described.returncode == 0, described.stderr
    [view] = json.loads(described.stdout)
    assert (view["type"], view["state"], view["protocol"]) == ("consumer", "Stable", "range")
    [member] = view["members"]
    assert member["client_id"] == "k1" and member["member_id"] == m.member_id
    assert member["member_epoch"] == view["group_epoch"] == view["assignment_epoch"] >= 1
    assert member["assignment"] == member["target_assignment"] == {topic: [0, 1, 2]}
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["client_id"])
            for r in view["offsets"]] == [(p, COMMITTED, 0, -COMMITTED, "k1")
                                          for p in range(PARTITIONS)]  # fmt: skip
    assert described.stderr.count("(negative LAG)") == PARTITIONS, described.stderr

    verbose = await cli("--describe", "--group", group, "--members", "--verbose", *boot)
    assert words(verbose.stdout)[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID",
                                        "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
                                        "TARGET-EPOCH", "TARGET-ASSIGNMENT"]  # fmt: skip
    epoch = str(member["member_epoch"])
    assert words(verbose.stdout)[1] == [group, m.member_id, member["host"], "k1", "3", epoch,
                                        f"{topic}:0,1,2", epoch, f"{topic}:0,1,2"]  # fmt: skip
    state = await cli("--describe", "--group", group, "--state", "--verbose", *boot)
    assert words(state.stdout)[0][-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert words(state.stdout)[1][-4:] == ["Stable", epoch, epoch, "1"]

    await m.close()

    async def empty() -> bool:
        out = await cli("describe", group, "--state", "--json", *boot)
        return out.returncode == 0 and json.loads(out.stdout)[0]["state"] == "Empty"

    await rc.wait_until(empty, 30, "the group to be Empty")

    # a reset without --dry-run or --execute: Kafka's warning, and the backward move is named
    latest = await cli("--reset-offsets", "--group", group, "--topic", topic, "--to-latest",
                       *boot)  # fmt: skip
    assert latest.returncode == 0, latest.stderr
    assert DRY_RUN_WARNING in latest.stderr.splitlines()
    assert latest.stderr.count("moves it BACKWARD") == PARTITIONS, latest.stderr
    assert [w[-2:] for w in words(latest.stdout)[1:]] == [[str(COMMITTED), "0"]] * PARTITIONS
    quiet = await cli("reset-offsets", group, "--all-topics", "--to-earliest", "--dry-run", *boot)
    assert "WARN: No action" not in quiet.stderr

    # --to-current --export: Kafka's CSV; --from-file brings it back after a reset
    exported = await cli("--reset-offsets", "--group", group, "--all-topics", "--to-current",
                         "--export", "--dry-run", *boot)  # fmt: skip
    assert exported.stdout == "".join(f"{topic},{p},{COMMITTED}\n" for p in range(PARTITIONS))
    csv = tmp_path / "offsets.csv"
    csv.write_text(exported.stdout)
    moved = await cli("--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                      "--execute", *boot)  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    assert await committed(boot, group) == [0] * PARTITIONS
    restored = await cli("--reset-offsets", "--group", group, "--from-file", str(csv),
                         "--execute", *boot)  # fmt: skip
    assert restored.returncode == 0, restored.stderr
    assert await committed(boot, group) == [COMMITTED] * PARTITIONS

    gone_offsets = await cli("--delete-offsets", "--group", group, "--topic", topic, *boot)
    assert gone_offsets.returncode == 0, gone_offsets.stderr
    assert gone_offsets.stdout.startswith(f"Request succeeded for deleting offsets from group "
                                          f"{group}.")  # fmt: skip
    assert await committed(boot, group) == []
    deleted = await cli("--delete", "--group", group, *boot)
    assert deleted.returncode == 0, deleted.stderr
    gone = await cli("--describe", "--group", group, *boot)
    assert gone.returncode == 1
    assert gone.stderr.strip() == f"groupcoord: consumer group '{group}' does not exist"


async def committed(boot: tuple[str, ...], group: str) -> list[int]:
    out = await cli("describe", group, "--json", *boot)
    assert out.returncode == 0, out.stderr
    return [r["current_offset"] for r in json.loads(out.stdout)[0]["offsets"]]
