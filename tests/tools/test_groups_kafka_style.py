"""`groupcoord groups` as a Kafka user expects it, run as a user runs it (`python -m coordinator.cli
groups ...`) against a standalone server with a real KIP-848 member (the Java client,
group.protocol=consumer): describe through ConsumerGroupDescribe (members, epochs, current and
target assignments, offsets and lag), Kafka's invocation style (--list, --describe --group,
--reset-offsets, --delete), list's bare names, the dry-run warning in Kafka's words, the
negative-LAG and backward --to-latest warnings (standalone stores no records: every log ends at
0, so a committed offset 5 is past it), --to-current, and --export / --from-file in Kafka's CSV.
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

pytestmark = [pytest.mark.clients, pytest.mark.java]

TOPIC, GROUP, PARTITIONS, COMMITTED = "t", "kgroup", 3, 5


async def cli(*args: str) -> Any:
    """The CLI off the event loop, so the member driver's output keeps being read meanwhile."""
    return await asyncio.to_thread(ops_util.groupcoord_cli, "groups", *args)


def words(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


async def test_a_kip848_group_through_kafka_style_commands(
    server: Any, members: Any, java_peers: Path, tmp_path: Path,
) -> None:
    broker = server(topics={TOPIC: PARTITIONS})
    boot = ("--bootstrap-server", broker.bootstrap)
    m = await members("java", "k1", bootstrap=broker.bootstrap, group=GROUP, topic=TOPIC,
                      group_protocol="consumer")
    await rc.wait_until(lambda: m.owned == frozenset(range(PARTITIONS)), 90,
                        "the member to own the topic", explain=lambda: rc.explain_members([m]))
    assert m.proc.stdin is not None
    m.proc.stdin.write(f"commit {COMMITTED}\n".encode())
    await m.proc.stdin.drain()
    await rc.wait_until(lambda: any(e["event"] == "committed" for e in m.events), 60,
                        "the commit", explain=lambda: rc.explain_members([m]))

    # list: bare names by default (Kafka's), Kafka's columns with --type/--state, ours with --table
    listed = await cli("--list", *boot)
    assert (listed.returncode, listed.stdout) == (0, f"{GROUP}\n"), listed.stderr
    typed = await cli("--list", "--type", "--state", *boot)
    assert words(typed.stdout) == [["GROUP", "TYPE", "STATE"], [GROUP, "Consumer", "Stable"]]
    assert words((await cli("list", "--state", "Empty", *boot)).stdout) == [["GROUP", "STATE"]]
    full = await cli("list", "--table", *boot)
    assert words(full.stdout)[1] == [GROUP, "consumer", "Stable", "consumer"]

    # describe: ConsumerGroupDescribe, not "does not exist"
    described = await cli("describe", GROUP, "--json", *boot)
    assert described.returncode == 0, described.stderr
    [view] = json.loads(described.stdout)
    assert (view["type"], view["state"], view["protocol"]) == ("consumer", "Stable", "range")
    [member] = view["members"]
    assert member["client_id"] == "k1" and member["member_id"] == m.member_id
    assert member["member_epoch"] == view["group_epoch"] == view["assignment_epoch"] >= 1
    assert member["assignment"] == member["target_assignment"] == {TOPIC: [0, 1, 2]}
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["client_id"])
            for r in view["offsets"]] == [(p, COMMITTED, 0, -COMMITTED, "k1")
                                          for p in range(PARTITIONS)]  # fmt: skip
    assert described.stderr.count("(negative LAG)") == PARTITIONS, described.stderr

    verbose = await cli("--describe", "--group", GROUP, "--members", "--verbose", *boot)
    assert words(verbose.stdout)[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID",
                                        "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
                                        "TARGET-EPOCH", "TARGET-ASSIGNMENT"]  # fmt: skip
    epoch = str(member["member_epoch"])
    assert words(verbose.stdout)[1] == [GROUP, m.member_id, member["host"], "k1", "3", epoch,
                                        "t:0,1,2", epoch, "t:0,1,2"]  # fmt: skip
    state = await cli("--describe", "--group", GROUP, "--state", "--verbose", *boot)
    assert words(state.stdout)[0][-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert words(state.stdout)[1][-4:] == ["Stable", epoch, epoch, "1"]

    await m.close()

    async def empty() -> bool:
        out = await cli("describe", GROUP, "--state", "--json", *boot)
        return out.returncode == 0 and json.loads(out.stdout)[0]["state"] == "Empty"

    await rc.wait_until(empty, 30, "the group to be Empty")

    # a reset without --dry-run or --execute: Kafka's warning, and the backward move is named
    latest = await cli("--reset-offsets", "--group", GROUP, "--topic", TOPIC, "--to-latest",
                       *boot)  # fmt: skip
    assert latest.returncode == 0, latest.stderr
    assert DRY_RUN_WARNING in latest.stderr.splitlines()
    assert latest.stderr.count("moves it BACKWARD") == PARTITIONS, latest.stderr
    assert [w[-2:] for w in words(latest.stdout)[1:]] == [[str(COMMITTED), "0"]] * PARTITIONS
    quiet = await cli("reset-offsets", GROUP, "--all-topics", "--to-earliest", "--dry-run", *boot)
    assert "WARN: No action" not in quiet.stderr

    # --to-current --export: Kafka's CSV; --from-file brings it back after a reset
    exported = await cli("--reset-offsets", "--group", GROUP, "--all-topics", "--to-current",
                         "--export", "--dry-run", *boot)  # fmt: skip
    assert exported.stdout == "".join(f"{TOPIC},{p},{COMMITTED}\n" for p in range(PARTITIONS))
    csv = tmp_path / "offsets.csv"
    csv.write_text(exported.stdout)
    moved = await cli("--reset-offsets", "--group", GROUP, "--all-topics", "--to-earliest",
                      "--execute", *boot)  # fmt: skip
    assert moved.returncode == 0, moved.stderr
    assert await committed(boot) == [0] * PARTITIONS
    restored = await cli("--reset-offsets", "--group", GROUP, "--from-file", str(csv),
                         "--execute", *boot)  # fmt: skip
    assert restored.returncode == 0, restored.stderr
    assert await committed(boot) == [COMMITTED] * PARTITIONS

    gone_offsets = await cli("--delete-offsets", "--group", GROUP, "--topic", TOPIC, *boot)
    assert gone_offsets.returncode == 0, gone_offsets.stderr
    assert gone_offsets.stdout.startswith(f"Request succeeded for deleting offsets from group "
                                          f"{GROUP}.")  # fmt: skip
    assert await committed(boot) == []
    deleted = await cli("--delete", "--group", GROUP, *boot)
    assert deleted.returncode == 0, deleted.stderr
    gone = await cli("--describe", "--group", GROUP, *boot)
    assert gone.returncode == 1
    assert gone.stderr.strip() == f"groupcoord: consumer group '{GROUP}' does not exist"


async def committed(boot: tuple[str, ...]) -> list[int]:
    out = await cli("describe", GROUP, "--json", *boot)
    assert out.returncode == 0, out.stderr
    return [r["current_offset"] for r in json.loads(out.stdout)[0]["offsets"]]
