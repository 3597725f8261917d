"""`groupcoord groups list|describe` against a running server: a group of real aiokafka consumers
(members, hosts, client ids, assignments, as confluent-kafka's admin client also sees them) and an
Empty group with committed offsets."""

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


def cli(*args: str) -> Any:
    return ops_util.groupcoord_cli("groups", *args)


async def test_list_and_describe_a_live_group(server: Any, members: Any) -> None:
    broker = server(topics={"t": PARTITIONS})
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

    listed = cli("list", "--bootstrap-server", broker.bootstrap, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["group_id"]: r for r in json.loads(listed.stdout)}
    assert rows["workers"] == {"group_id": "workers", "type": "classic", "state": "Stable",
                               "protocol_type": "consumer"}  # fmt: skip
    assert rows["archived"]["state"] == "Empty"

    table = cli("list", "--bootstrap-server", broker.bootstrap)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]
    assert ["workers", "classic", "Stable", "consumer"] in [line.split() for line in lines]

    async def described() -> dict[str, Any] | None:
        out = await asyncio.to_thread(
            cli, "describe", "workers", "--bootstrap-server", broker.bootstrap, "--json"
        )
        assert out.returncode == 0, out.stderr
        view: dict[str, Any] = json.loads(out.stdout)
        owned = {m["member_id"]: frozenset(m["assignment"].get("t", [])) for m in view["members"]}
        return view if owned == {m.member_id: m.owned for m in ms} else None

    view = await rc.wait_until(described, 30, "describe to agree with the clients")
    assert view["state"] == "Stable" and view["protocol"] == "range"
    assert view["coordinator"] == broker.bootstrap
    assert sorted(m["client_id"] for m in view["members"]) == ["alpha", "beta"]
    assert {m["host"] for m in view["members"]} == {"/127.0.0.1"}
    # The same as confluent-kafka's admin client sees.
    confluent = await asyncio.to_thread(rc.describe_confluent, broker.bootstrap, "workers")
    assert confluent.members == {
        m["member_id"]: frozenset(m["assignment"]["t"]) for m in view["members"]
    }

    text = cli("describe", "workers", "--bootstrap-server", broker.bootstrap)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert "ASSIGNMENT-STRATEGY" in out and "CURRENT-OFFSET" in out
    for m in ms:
        assert m.member_id is not None and m.member_id in out
        owned = ",".join(str(p) for p in sorted(m.owned or ()))
        assert f"t({owned})" in out

    archived = cli("describe", "archived", "--bootstrap-server", broker.bootstrap, "--json")
    assert archived.returncode == 0, archived.stderr
    data = json.loads(archived.stdout)
    assert data["state"] == "Empty" and data["members"] == []
    assert data["offsets"] == {"t": {"0": 42, "5": 7}}
    text = cli("describe", "archived", "--bootstrap-server", broker.bootstrap).stdout
    assert ["t", "0", "42", "-", "-", "-"] in [line.split() for line in text.splitlines()]

    for m in ms:
        await m.close()


async def test_describe_unknown_group_and_unreachable_server(server: Any) -> None:
    broker = server(topics={"t": 1})
    out = cli("describe", "nobody", "--bootstrap-server", broker.bootstrap)
    assert out.returncode == 1
    assert out.stderr.strip() == "groupcoord: consumer group 'nobody' does not exist"

    port = rc.free_port()
    out = cli("list", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout-ms", "2000")
    assert out.returncode == 1
    assert out.stderr.startswith(f"groupcoord: cannot connect to 127.0.0.1:{port}")
    assert out.stderr.count("\n") == 1

    out = cli("list", "--bootstrap-server", "nohost")
    assert out.returncode == 2
    assert out.stderr.startswith("groupcoord: --bootstrap-server: expected HOST:PORT")


def test_decode_assignment_reads_consumer_protocol_bytes() -> None:
    from bench import wire

    assert consumer.assignment_partitions(wire.assignment("t", [3, 1])) == {"t": [1, 3]}
    assert consumer.assignment_partitions(b"") == {}
    assert consumer.assignment_partitions(b"\x00\x00\x7f\xff\xff\xff") is None
