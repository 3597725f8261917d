"""`groupcoord groups fleet`: which member owns which state partition and each partition's load
time, read from /fleet of one or several members (the documents are fixed, set as
`Server.fleet_status` on real HTTP endpoints on 127.0.0.1 port 0; no upstream runs), and its exit
codes: 0 ok, 1 unreachable or not in a fleet, 2 a bad --url."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

from coordinator.serve import http
from coordinator.tools.groups import _ranges, merge_fleet, render_fleet
from tests.serve.test_http_fleet import ME, OTHER, fleet_document, new_server
from tests.support import ops_util


def other_document() -> dict[str, Any]:
    """The same fleet as `fleet_document`, seen from the other member (it serves 3 and 4)."""
    document = fleet_document()
    document.update(member_id="9a2b", address=OTHER, ready=True)
    for row in document["partitions"]:
        p = row["partition"]
        if p in (3, 4):
            row.update(status="serving", owner=OTHER, epoch=7, load_seconds=0.25 * p,
                       loaded_at=1_700_000_100.0, groups=p)  # fmt: skip
        elif row["owner"] == ME:
            row.update(status="remote", epoch=None, load_seconds=None, groups=0)
    return document


def cli(*args: str) -> Any:
    return ops_util.groupcoord_cli("groups", "fleet", *args)


def rows_of(out: str) -> dict[str, list[str]]:
    """The partition table's lines, by partition number."""
    lines = out.split("\n\n")[2].splitlines()
    assert lines[0].split() == [
        "PARTITION", "STATUS", "OWNER", "EPOCH", "GROUPS", "LOAD-SECONDS", "LOADED-AT",
    ]  # fmt: skip
    return {line.split()[0]: line.split() for line in lines[1:]}


async def test_fleet_from_one_member_and_merged_from_two() -> None:
    first, second = new_server(), new_server()
    first.fleet_status = fleet_document
    second.fleet_status = other_document
    a = await http.start_http(first, "127.0.0.1", 0)
    b = await http.start_http(second, "127.0.0.1", 0)
    url_a, url_b = f"http://127.0.0.1:{a.port}", f"http://127.0.0.1:{b.port}/fleet"
    try:
        one = await asyncio.to_thread(cli, "--url", url_a)
        both = await asyncio.to_thread(cli, "--url", url_a, "--url", url_b)
        as_json = await asyncio.to_thread(cli, "--url", url_a, "--url", url_b, "--json")
    finally:
        await a.close()
        await b.close()

    assert one.returncode == 0, one.stderr
    head, members, _ = one.stdout.split("\n\n")
    assert head.splitlines()[1].split() == [
        "groupcoord-fleet", "__groupcoord_state", "7", "2", "6",
        "serving=2", "loading=1", "remote=2", "fenced=1",
    ]  # fmt: skip
    assert [line.split() for line in members.splitlines()] == [
        ["MEMBER", "READY", "#PARTITIONS", "PARTITIONS"],
        [ME, "no", "3", "0-2"],
        [OTHER, "-", "2", "3-4"],  # not asked: its readiness is unknown
    ]
    rows = rows_of(one.stdout)
    assert rows["0"] == ["0", "serving", ME, "7", "3", "0.125", "2023-11-14T22:13:20Z"]
    assert rows["3"] == ["3", "remote", OTHER, "-", "-", "-", "-"]  # only its owner knows
    assert rows["5"] == ["5", "fenced", "-", "8", "-", "-", "-"]

    assert both.returncode == 0, both.stderr
    rows = rows_of(both.stdout)
    assert rows["0"] == ["0", "serving", ME, "7", "3", "0.125", "2023-11-14T22:13:20Z"]
    assert rows["3"] == ["3", "serving", OTHER, "7", "3", "0.750", "2023-11-14T22:15:00Z"]
    assert rows["4"][:6] == ["4", "serving", OTHER, "7", "4", "1.000"]
    assert [OTHER, "yes", "2", "3-4"] in [line.split() for line in both.stdout.splitlines()]

    assert as_json.returncode == 0, as_json.stderr
    view = json.loads(as_json.stdout)
    assert view["asked"] == [ME, OTHER] and view["ready"] == {ME: False, OTHER: True}
    assert [(r["partition"], r["status"], r["owner"]) for r in view["partitions"]] == [
        (0, "serving", ME), (1, "serving", ME), (2, "loading", ME),
        (3, "serving", OTHER), (4, "serving", OTHER), (5, "fenced", None),
    ]  # fmt: skip


async def test_exit_codes() -> None:
    server = new_server()  # not in a fleet: /fleet is 404
    obs = await http.start_http(server, "127.0.0.1", 0)
    try:
        not_fleet = await asyncio.to_thread(cli, "--url", f"http://127.0.0.1:{obs.port}")
    finally:
        await obs.close()
    assert not_fleet.returncode == 1
    assert not_fleet.stderr.strip() == (
        f"groupcoord: http://127.0.0.1:{obs.port}/fleet: not in a sidecar fleet"
    )

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    down = await asyncio.to_thread(
        cli, "--url", f"http://127.0.0.1:{closed}", "--timeout-ms", "2000"
    )
    assert down.returncode == 1
    assert down.stderr.startswith(f"groupcoord: cannot reach http://127.0.0.1:{closed}/fleet: ")
    assert down.stdout == ""

    bad = await asyncio.to_thread(cli, "--url", "127.0.0.1:9108")
    assert bad.returncode == 2 and "--url: expected http://HOST:PORT" in bad.stderr


def test_merge_prefers_the_owners_row_and_the_newest_generation() -> None:
    older = fleet_document()
    older["generation"] = 6
    newer = other_document()
    view = merge_fleet([older, newer])
    assert view["generation"] == 7 and view["members"] == [ME, OTHER]
    assert view["partitions"][3]["status"] == "serving"  # OTHER's own row
    assert view["partitions"][0]["status"] == "serving"  # ME's own row
    assert view["partitions"][5]["status"] == "fenced"  # no owner: the first document's row
    alone = merge_fleet([newer])
    assert alone["partitions"][0]["status"] == "remote"  # ME not asked: OTHER's view of it
    text = render_fleet(alone)
    assert f"{OTHER}  yes" in text


def test_ranges() -> None:
    assert _ranges([]) == "-"
    assert _ranges([5]) == "5"
    assert _ranges([7, 0, 1, 2, 5, 8]) == "0-2,5,7-8"
