"""`groupcoord groups` against a running standalone server: a group of real aiokafka consumers
(members, hosts, client ids, assignments, as confluent-kafka's admin client also sees them) and an
Empty group with committed offsets; the describe views, delete and the refusal to reset a group
with members; exit codes. The offsets of real data (lag, resets, delete-offsets) are tested in
sidecar mode in front of tansu and against tansu itself (test_groups_offsets.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from protocol import consumer
from tests.support import ops_util
from tests.support import realclients as rc
from tests.support.durability_util import RawConn

pytestmark = pytest.mark.clients

PARTITIONS = 6
OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"]  # fmt: skip


def cli(*args: str) -> Any:
    return ops_util.groupcoord_cli("groups", *args)


async def acli(*args: str) -> Any:
    """`cli` off the event loop, so the member drivers' output keeps being read meanwhile."""
    return await asyncio.to_thread(cli, *args)


def lines(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


async def test_list_and_describe_a_live_group(server: Any, members: Any) -> None:
    broker = server(topics={"t": PARTITIONS})
    boot = ("--bootstrap-server", broker.bootstrap)
    ms = [
        await members("aiokafka", name, bootstrap=broker.bootstrap, group="workers", topic="t")
        for name in ("alpha", "beta")
    ]
    await rc.wait_until(
        lambda: rc.partition_of(ms, PARTITIONS) and all(m.member_id for m in ms), 60,
        "two members to split the topic", explain=lambda: rc.explain_members(ms, broker),
    )  # fmt: skip

    # An Empty group with committed offsets (simple commits, generation -1).
    conn = await RawConn.open(broker.host, broker.port)
    try:
        assert await conn.commit("archived", "t", {0: 42, 5: 7}) == {0: 0, 5: 0}
    finally:
        conn.close()

    listed = await acli("list", *boot, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["group_id"]: r for r in json.loads(listed.stdout)}
    assert rows["workers"] == {"group_id": "workers", "type": "classic", "state": "Stable",
                               "protocol_type": "consumer"}  # fmt: skip
    assert rows["archived"]["state"] == "Empty"

    table = await acli("list", "--table", *boot)
    assert table.returncode == 0, table.stderr
    assert lines(table.stdout)[0] == ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]
    assert ["workers", "classic", "Stable", "consumer"] in lines(table.stdout)

    async def described() -> dict[str, Any] | None:
        out = await acli("describe", "workers", *boot, "--json")
        assert out.returncode == 0, out.stderr
        [view] = json.loads(out.stdout)
        owned = {m["member_id"]: frozenset(m["assignment"].get("t", [])) for m in view["members"]}
        return view if owned == {m.member_id: m.owned for m in ms} else None

    view = await rc.wait_until(described, 30, "describe to agree with the clients")
    assert view["state"] == "Stable" and view["protocol"] == "range"
    assert view["coordinator"] == {"node_id": 0, "host": broker.host, "port": broker.port}
    assert sorted(m["client_id"] for m in view["members"]) == ["alpha", "beta"]
    assert {m["host"] for m in view["members"]} == {"/127.0.0.1"}
    # Every assigned partition has a row with its owner; standalone groupcoord holds no records,
    # so each log ends at 0 (ListOffsets answered by groupcoord itself).
    by_member = {m["member_id"]: m for m in view["members"]}
    assert sorted(r["partition"] for r in view["offsets"]) == list(range(PARTITIONS))
    for r in view["offsets"]:
        owner = by_member[r["consumer_id"]]
        assert r["partition"] in owner["assignment"]["t"]
        assert (r["host"], r["client_id"]) == (owner["host"], owner["client_id"])
        assert r["log_end_offset"] == 0
    # The same as confluent-kafka's admin client sees.
    confluent = await asyncio.to_thread(rc.describe_confluent, broker.bootstrap, "workers")
    assert confluent.members == {
        m["member_id"]: frozenset(m["assignment"]["t"]) for m in view["members"]
    }

    # The default view is kafka-consumer-groups.sh's offsets table.
    text = await acli("describe", "workers", *boot)
    assert text.returncode == 0, text.stderr
    rows_out = lines(text.stdout)
    assert rows_out[0] == OFFSETS_HEADER
    for m in ms:
        for p in m.owned or ():
            assert ["workers", "t", str(p), "-", "0", "-", m.member_id, "/127.0.0.1",
                    m.name] in rows_out  # fmt: skip

    # --state and --members --verbose, asked together: one section each, in that order.
    text = await acli("describe", "workers", "--state", "--members", "--verbose", *boot)
    assert text.returncode == 0, text.stderr
    state, members_table = text.stdout.strip().split("\n\n")
    assert lines(state) == [  # --verbose: the epochs of a KIP-848 group, `-` for a classic one
        ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "GROUP-EPOCH",
         "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"],
        ["workers", broker.bootstrap, "(0)", "range", "Stable", "-", "-", "2"],
    ]  # fmt: skip
    # Kafka 4's columns; the epochs and the target are a KIP-848 group's: `-` here
    assert lines(members_table)[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID",
                                       "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT",
                                       "TARGET-EPOCH", "TARGET-ASSIGNMENT"]  # fmt: skip
    for m in ms:
        owned = ",".join(str(p) for p in sorted(m.owned or ()))
        assert ["workers", m.member_id, "/127.0.0.1", m.name, str(len(m.owned or ())), "-",
                f"t:{owned}", "-", "-"] in lines(members_table)  # fmt: skip
    plain = await acli("describe", "workers", "--members", *boot)
    assert lines(plain.stdout)[0][-1] == "#PARTITIONS"  # no ASSIGNMENT without --verbose

    archived = await acli("describe", "archived", *boot, "--json")
    assert archived.returncode == 0, archived.stderr
    [data] = json.loads(archived.stdout)
    assert data["state"] == "Empty" and data["members"] == []
    # LAG is LOG-END-OFFSET - CURRENT-OFFSET, unclamped, as Kafka computes it.
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["consumer_id"])
            for r in data["offsets"]] == [(0, 42, 0, -42, None), (5, 7, 0, -7, None)]  # fmt: skip
    text = await acli("describe", "archived", *boot)
    assert ["archived", "t", "0", "42", "0", "-42", "-", "-", "-"] in lines(text.stdout)
    said = text.stderr.splitlines()
    assert said[0] == "groupcoord: consumer group 'archived' has no active members"
    # a committed offset past the log end is said, not only shown as a negative LAG
    assert said[1:] == [
        f"groupcoord: warning: group 'archived': the committed offset {o} of t-{p} is past its "
        "log end offset 0 (negative LAG): the log was truncated or recreated, or the broker's "
        "ListOffsets answer is wrong; consumers resuming there may skip or stall"
        for p, o in ((0, 42), (5, 7))
    ]

    # --all-groups: both groups, one document each.
    everything = await acli("describe", "--all-groups", "--state", *boot, "--json")
    assert everything.returncode == 0, everything.stderr
    assert {d["group_id"]: d["state"] for d in json.loads(everything.stdout)} == {
        "archived": "Empty", "workers": "Stable"
    }  # fmt: skip
    assert all("offsets" not in d for d in json.loads(everything.stdout))  # not asked for

    # Resetting a group with members is refused, as Kafka does; nothing is committed.
    refused = await acli("reset-offsets", "workers", "--topic", "t", "--to-offset", "0",
                         "--execute", *boot)  # fmt: skip
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "groupcoord: Assignments can only be reset if the group 'workers' is inactive, but the "
        "current state is Stable."
    )
    assert refused.stdout == ""
    after = json.loads((await acli("describe", "workers", *boot, "--json")).stdout)[0]
    assert all(r["current_offset"] is None for r in after["offsets"])

    # delete: refused while the group has members (NON_EMPTY_GROUP), done once it is Empty.
    busy = await acli("delete", "workers", "archived", *boot)
    assert busy.returncode == 1
    assert "* Group 'workers' could not be deleted due to: NON_EMPTY_GROUP" in busy.stderr
    assert busy.stdout.strip() == "These consumer groups were deleted successfully: 'archived'"
    gone = await acli("describe", "archived", *boot)
    assert gone.returncode == 1
    assert gone.stderr.strip() == "groupcoord: consumer group 'archived' does not exist"

    for m in ms:
        await m.close()
    await rc.wait_until(
        lambda: json.loads(cli("describe", "workers", "--state", *boot, "--json").stdout)[0][
            "state"] == "Empty", 30, "workers to be Empty",
    )  # fmt: skip
    deleted = await acli("delete", "workers", *boot, "--json")
    assert deleted.returncode == 0, deleted.stderr
    assert json.loads(deleted.stdout) == [{"group_id": "workers", "error": None}]
    assert json.loads((await acli("list", *boot, "--json")).stdout) == []


async def test_describe_unknown_group_and_unreachable_server(server: Any) -> None:
    broker = server(topics={"t": 1})
    out = cli("describe", "nobody", "--bootstrap-server", broker.bootstrap)
    assert out.returncode == 1
    assert out.stderr.strip() == "groupcoord: consumer group 'nobody' does not exist"

    out = cli("delete", "nobody", "--bootstrap-server", broker.bootstrap)
    assert out.returncode == 1
    assert "* Group 'nobody' could not be deleted due to: GROUP_ID_NOT_FOUND" in out.stderr

    port = rc.free_port()
    out = cli("list", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout-ms", "2000")
    assert out.returncode == 1
    assert out.stderr.startswith(f"groupcoord: cannot connect to 127.0.0.1:{port}")
    assert out.stderr.count("\n") == 1

    out = cli("list", "--bootstrap-server", "nohost")
    assert out.returncode == 2
    assert out.stderr.startswith("groupcoord: --bootstrap-server: expected HOST:PORT")


@pytest.mark.parametrize(
    "args",
    [
        ["describe"],  # no group and no --all-groups
        ["describe", "g", "--all-groups"],
        ["delete"],
        ["reset-offsets", "g", "--to-earliest"],  # no scope
        ["reset-offsets", "g", "--all-topics"],  # no scenario
        ["reset-offsets", "g", "--all-topics", "--topic", "t", "--to-earliest"],
        ["reset-offsets", "g", "--all-topics", "--to-earliest", "--to-latest"],
        ["reset-offsets", "g", "--all-topics", "--to-earliest", "--dry-run", "--execute"],
        ["reset-offsets", "g", "--all-topics", "--to-datetime", "yesterday"],
        ["reset-offsets", "g", "--all-topics", "--by-duration", "PT"],
        ["reset-offsets", "g", "--all-topics", "--by-duration", "10 minutes"],
        ["reset-offsets", "g", "--topic", "t:a", "--to-earliest"],
        ["reset-offsets", "g", "--all-topics", "--from-file", "plan.csv"],  # a scope too
        ["reset-offsets", "g", "--to-current"],  # no scope
        ["delete-offsets", "--topic", "t"],  # no group
        ["delete-offsets", "g", "--group", "h", "--topic", "t"],  # two groups
        ["delete-offsets", "g"],  # no --topic
        ["delete-offsets", "g", "--topic", "t:"],
    ],
)
def test_bad_arguments_exit_2(args: list[str]) -> None:
    # No server: a bad argument is found before anything is asked.
    out = cli(*args, "--bootstrap-server", f"127.0.0.1:{rc.free_port()}")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stdout == ""


def test_reset_arguments_parse_as_kafka_takes_them() -> None:
    from coordinator.tools import groups_reset as reset

    assert reset.parse_duration_ms("PT1H30M") == 5_400_000
    assert reset.parse_duration_ms("P1DT2H") == 93_600_000
    assert reset.parse_duration_ms("pt0.5s") == 500
    assert reset.parse_duration_ms("1h30m") == 5_400_000
    assert reset.parse_duration_ms("2d") == 172_800_000
    assert reset.parse_duration_ms("250ms") == 250
    for bad in ("", "P", "PT", "1x", "h1", "-PT1H"):
        with pytest.raises(ValueError):
            reset.parse_duration_ms(bad)
    assert reset.parse_datetime_ms("2024-03-01T12:00:00Z") == 1_709_294_400_000
    assert reset.parse_datetime_ms("2024-03-01T13:00:00.250+01:00") == 1_709_294_400_250
    assert reset.parse_topic_arg("orders") == ("orders", None)
    assert reset.parse_topic_arg("orders:2,0,2") == ("orders", [0, 2])
    for bad in ("", ":1", "orders:", "orders:x", "orders:-1"):
        with pytest.raises(ValueError):
            reset.parse_topic_arg(bad)


def test_decode_assignment_reads_consumer_protocol_bytes() -> None:
    from bench import wire

    assert consumer.assignment_partitions(wire.assignment("t", [3, 1])) == {"t": [1, 3]}
    assert consumer.assignment_partitions(b"") == {}
    assert consumer.assignment_partitions(b"\x00\x00\x7f\xff\xff\xff") is None
