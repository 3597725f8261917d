"""`groupcoord groups` on real data: the sidecar in front of tansu (groupcoord coordinates, tansu
holds the records and answers the ListOffsets that pass through), and tansu on its own as any
Kafka broker. A real producer and a real aiokafka consumer; LOG-END-OFFSET and LAG, every
reset-offsets scenario as a dry run and executed, delete-offsets, delete, --json.

Records are produced one per batch: tansu answers ListOffsets(latest) with the last batch's base
offset + 1, which is the log end only when that batch holds one record.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from coordinator.tools.groups import DRY_RUN_WARNING
from tests.support import ops_util
from tests.support import realclients as rc
from tests.support.sidecar_util import Stack, create_topic, stack

pytestmark = pytest.mark.clients
__all__ = ["stack"]

TOPIC, GROUP = "orders", "billing"


async def acli(*args: str) -> Any:
    return await asyncio.to_thread(ops_util.groupcoord_cli, "groups", *args)


async def send_each(bootstrap: str, counts: dict[int, int]) -> None:
    """`counts[p]` records to partition p, each acknowledged before the next (one per batch)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=10000)
    await producer.start()
    try:
        for partition, n in counts.items():
            for i in range(n):
                await (await producer.send(TOPIC, f"{partition}-{i}".encode(), partition=partition))
    finally:
        await producer.stop()


async def describe(boot: str, group: str = GROUP) -> dict[str, Any]:
    out = await acli("describe", group, "--bootstrap-server", boot, "--json")
    if out.returncode != 0:  # not an AssertionError: wait_until takes it as "not yet"
        raise RuntimeError(out.stderr)
    [document] = json.loads(out.stdout)
    return dict(document)


def column(document: dict[str, Any], key: str) -> dict[int, Any]:
    return {r["partition"]: r[key] for r in document["offsets"]}


async def plan(boot: str, *args: str) -> tuple[dict[int, int], str]:
    """A reset's plan (--json): partition -> NEW-OFFSET, and what it said on stderr."""
    out = await acli("reset-offsets", GROUP, *args, "--bootstrap-server", boot, "--json")
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["executed"] == ("--execute" in args)
    return {r["partition"]: r["new_offset"] for r in document["offsets"]}, out.stderr


async def test_lag_resets_and_deletes_through_the_sidecar(stack: Stack) -> None:
    tansu = stack.tansu()
    sidecar = stack.sidecar(tansu.bootstrap)
    boot = sidecar.bootstrap
    await create_topic(boot, TOPIC, 3)
    await send_each(boot, {0: 5, 1: 7, 2: 9})

    reader = await stack.consumer("aiokafka", "reader", boot, GROUP, TOPIC)

    async def caught_up() -> dict[str, Any] | None:
        document = await describe(boot)
        done = column(document, "current_offset") == {0: 5, 1: 7, 2: 9}
        return document if done and all(column(document, "consumer_id").values()) else None

    live = await rc.wait_until(caught_up, 60, "the reader to commit every record",
                               explain=stack.explain)  # fmt: skip
    assert live["state"] == "Stable"
    assert column(live, "log_end_offset") == {0: 5, 1: 7, 2: 9}
    assert column(live, "lag") == {0: 0, 1: 0, 2: 0}
    assert set(column(live, "client_id").values()) == {"reader"}
    verbose = await acli("describe", GROUP, "--members", "--verbose", "--bootstrap-server", boot)
    [member] = [line.split() for line in verbose.stdout.splitlines()[1:]]
    assert member[0] == GROUP and member[3:] == ["reader", "3", "-", "orders:0,1,2", "-", "-"]
    # A reset of a group with members is refused; its dry run is shown, with the refusal noted.
    refused = await acli("reset-offsets", GROUP, "--all-topics", "--to-earliest", "--execute",
                         "--bootstrap-server", boot)  # fmt: skip
    assert refused.returncode == 1 and refused.stdout == ""
    assert "is inactive, but the current state is Stable." in refused.stderr
    assert (await plan(boot, "--all-topics", "--to-earliest"))[0] == {0: 0, 1: 0, 2: 0}

    await reader.close()
    middle_ms = int(time.time() * 1000)
    await send_each(boot, {0: 2, 2: 4})

    # The log end comes from tansu (ListOffsets through the sidecar); the lag is the difference.
    idle = await describe(boot)
    assert idle["state"] == "Empty"
    assert column(idle, "current_offset") == {0: 5, 1: 7, 2: 9}
    assert column(idle, "log_end_offset") == {0: 7, 1: 7, 2: 13}
    assert column(idle, "lag") == {0: 2, 1: 0, 2: 4}
    assert set(column(idle, "consumer_id").values()) == {None}
    text = await acli("describe", GROUP, "--bootstrap-server", boot)
    assert [GROUP, TOPIC, "0", "5", "7", "2", "-", "-", "-"] in [
        line.split() for line in text.stdout.splitlines()
    ]

    # Dry runs (the default): the plan of each scenario, nothing committed.
    assert (await plan(boot, "--topic", TOPIC, "--to-earliest"))[0] == {0: 0, 1: 0, 2: 0}
    assert (await plan(boot, "--topic", f"{TOPIC}:2", "--to-latest"))[0] == {2: 13}
    new, said = await plan(boot, "--all-topics", "--to-offset", "8")
    assert new == {0: 7, 1: 7, 2: 8}  # clamped to the log end, as Kafka does
    assert "New offset (8) is higher than latest offset for topic partition orders-0." in said
    new, said = await plan(boot, "--all-topics", "--shift-by", "-6")
    assert new == {0: 0, 1: 1, 2: 3}  # 5 - 6 is clamped to the log start
    assert "New offset (-1) is lower than earliest offset for topic partition orders-0." in said
    middle = datetime.fromtimestamp(middle_ms / 1000, UTC).isoformat(timespec="milliseconds")
    new, said = await plan(boot, "--all-topics", "--to-datetime", middle)
    assert new == {0: 5, 1: 7, 2: 9}  # the first record at or after; none on 1: its log end
    assert "Partition 1 from topic orders is empty. Falling back to latest known offset." in said
    assert (await plan(boot, "--all-topics", "--to-datetime", "2000-01-01T00:00:00Z"))[0] == {
        0: 0, 1: 0, 2: 0
    }  # fmt: skip
    assert (await plan(boot, "--all-topics", "--by-duration", "P1D"))[0] == {0: 0, 1: 0, 2: 0}
    text = await acli("reset-offsets", GROUP, "--topic", f"{TOPIC}:0", "--to-earliest",
                      "--dry-run", "--bootstrap-server", boot)  # fmt: skip
    assert [line.split() for line in text.stdout.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [GROUP, TOPIC, "0", "5", "0"],
    ]
    assert column(await describe(boot), "current_offset") == {0: 5, 1: 7, 2: 9}
    missing = await acli("reset-offsets", GROUP, "--topic", f"{TOPIC}:7", "--to-earliest",
                         "--bootstrap-server", boot)  # fmt: skip
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [  # neither --dry-run nor --execute: Kafka's warning
        DRY_RUN_WARNING, 'groupcoord: The partitions "orders-7" do not exist'
    ]

    # --execute commits the plan (aiokafka's commit, generation -1).
    assert (await plan(boot, "--topic", f"{TOPIC}:2", "--shift-by", "-2", "--execute"))[0] == {
        2: 7
    }  # fmt: skip
    after = await describe(boot)
    assert column(after, "current_offset") == {0: 5, 1: 7, 2: 7}
    assert column(after, "lag") == {0: 2, 1: 0, 2: 6}
    await plan(boot, "--all-topics", "--to-earliest", "--execute")
    after = await describe(boot)
    assert column(after, "current_offset") == {0: 0, 1: 0, 2: 0}
    assert column(after, "lag") == {0: 7, 1: 7, 2: 13}

    # delete-offsets: one partition, then the whole topic.
    out = await acli("delete-offsets", GROUP, "--topic", f"{TOPIC}:0", "--bootstrap-server", boot)
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.splitlines()[0] == f"Request succeeded for deleting offsets from group {GROUP}."
    )
    assert [line.split() for line in out.stdout.splitlines()[1:]] == [
        ["TOPIC", "PARTITION", "STATUS"], [TOPIC, "0", "Successful"]
    ]  # fmt: skip
    assert sorted(column(await describe(boot), "current_offset")) == [1, 2]
    out = await acli(
        "delete-offsets", GROUP, "--topic", TOPIC, "--bootstrap-server", boot, "--json"
    )
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["error"] is None
    assert document["partitions"] == [  # every partition of the topic, as Kafka's --topic T
        {"topic": TOPIC, "partition": p, "error": None} for p in (0, 1, 2)
    ]
    assert (await describe(boot))["offsets"] == []

    out = await acli("delete", GROUP, "--bootstrap-server", boot)
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.strip() == f"Deletion of requested consumer groups ('{GROUP}') was successful."
    )
    listed = await acli("list", "--bootstrap-server", boot, "--json")
    assert json.loads(listed.stdout) == []


async def test_straight_against_tansu(stack: Stack) -> None:
    """No groupcoord: tansu is the coordinator and holds the data."""
    tansu = stack.tansu()
    boot = tansu.bootstrap
    await create_topic(boot, TOPIC, 2)
    await send_each(boot, {0: 3, 1: 4})

    reader = await stack.consumer("aiokafka", "reader", boot, "live", TOPIC)

    async def committed() -> dict[str, Any] | None:
        document = await describe(boot, "live")
        return document if column(document, "current_offset") == {0: 3, 1: 4} else None

    live = await rc.wait_until(committed, 60, "the reader to commit", explain=stack.explain)
    assert column(live, "log_end_offset") == {0: 3, 1: 4}
    state = await acli("describe", "live", "--state", "--bootstrap-server", boot)
    assert state.stdout.splitlines()[1].split()[:3] == [
        "live",
        boot,
        f"({live['coordinator']['node_id']})",
    ]
    refused = await acli("reset-offsets", "live", "--all-topics", "--to-earliest", "--execute",
                         "--bootstrap-server", boot)  # fmt: skip
    assert refused.returncode == 1
    assert "Assignments can only be reset if the group 'live' is inactive" in refused.stderr

    # A group that never had members: reset --execute creates its offsets, as Kafka allows.
    out = await acli("reset-offsets", "fresh", "--topic", TOPIC, "--to-latest", "--execute",
                     "--bootstrap-server", boot, "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert [(r["partition"], r["current_offset"], r["new_offset"])
            for r in json.loads(out.stdout)["offsets"]] == [(0, None, 3), (1, None, 4)]  # fmt: skip
    await send_each(boot, {1: 2})
    fresh = await describe(boot, "fresh")
    assert column(fresh, "lag") == {0: 0, 1: 2}
    listed = await acli("list", "--bootstrap-server", boot, "--json")
    assert {"fresh", "live"} <= {g["group_id"] for g in json.loads(listed.stdout)}
    await reader.close()
