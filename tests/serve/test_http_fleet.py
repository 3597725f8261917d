"""A sidecar fleet on the operator endpoint: GET /fleet (the fleet document, 404 outside a fleet)
and the status page's "Fleet" section. The fleet is a fixed document set as
`Server.fleet_status`, as coordinator.sidecar.fleet does; no upstream runs. Real sockets on
127.0.0.1 port 0."""

from __future__ import annotations

import copy
import html
import itertools
import json
import re
from typing import Any

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.topics import TopicCatalog
from coordinator.serve import http
from coordinator.serve.server import Server, ServerOptions
from coordinator.serve.status import FLEET_STATUSES, fleet_counts, render_html
from tests.serve.test_observability import request

ME = "10.0.0.7:9094"
OTHER = "10.0.0.8:9094"
LOADED_AT = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def fleet_document() -> dict[str, Any]:
    """What Fleet.status() returns for a member of a 2-member fleet over 6 state partitions."""
    statuses = [
        ("serving", ME, 7, 0.125, 3, 0),
        ("serving", ME, 7, 0.5, 0, 2),
        ("loading", ME, 7, None, 0, 0),
        ("remote", OTHER, None, None, 0, 0),
        ("remote", OTHER, None, 9.75, 0, 0),  # a load time left from when it was ours
        ("fenced", None, 8, None, 0, 0),
    ]
    return {
        "member_id": "4f1c0d",
        "address": ME,
        "state_topic": "__groupcoord_state",
        "fleet_group": "groupcoord-fleet",
        "generation": 7,
        "ready": False,
        "rebalances": 3,
        "error": None,
        "members": [ME, OTHER],
        "partitions": [
            {
                "partition": p,
                "status": status,
                "owner": owner,
                "epoch": epoch,
                "load_seconds": load,
                "loaded_at": LOADED_AT if load is not None else None,
                "groups": groups,
                "repaired_keys": repaired,
            }
            for p, (status, owner, epoch, load, groups, repaired) in enumerate(statuses)
        ],
    }


async def get(port: int, path: str) -> tuple[int, bytes]:
    raw = f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    head, _, body = (await request(port, raw)).partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def new_server() -> Server:
    ids = itertools.count()
    options = ServerOptions(port=0, coordinator=CoordinatorConfig(initial_rebalance_delay_ms=0))
    return Server(options, TopicCatalog(()), lambda p: f"{p}-{next(ids)}")


def fleet_table_rows(page: str) -> list[list[str]]:
    """The cells (text only) of the page's state-partition table."""
    table = page[page.index("<table class=parts>") :]
    body = table[table.index("<tbody>") : table.index("</tbody>")]
    rows = re.findall(r"<tr>(.*?)</tr>", body)
    return [
        [
            html.unescape(re.sub(r"<[^>]+>", "", cell))
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", r)
        ]
        for r in rows
    ]


async def test_fleet_endpoint_serves_the_document_and_404s_outside_a_fleet() -> None:
    server = new_server()
    obs = await http.start_http(server, "127.0.0.1", 0)
    assert obs.port
    try:
        status, body = await get(obs.port, "/fleet")
        assert (status, body) == (404, b"not in a sidecar fleet\n")  # one line of text
        response = await request(obs.port, b"GET /fleet HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert b"Content-Type: text/plain" in response

        document = fleet_document()
        server.fleet_status = lambda: document
        status, body = await get(obs.port, "/fleet")
        assert status == 200 and json.loads(body) == document
        assert (await get(obs.port, "/fleet/"))[0] == 200
        response = await request(obs.port, b"GET /fleet HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert b"Content-Type: application/json" in response
        head = await request(obs.port, b"HEAD /fleet HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")

        document["generation"] = 8  # read at request time, not cached
        assert json.loads((await get(obs.port, "/fleet"))[1])["generation"] == 8
    finally:
        await obs.close()


async def test_status_page_shows_the_fleet_section_only_in_a_fleet() -> None:
    server = new_server()
    obs = await http.start_http(server, "127.0.0.1", 0)
    assert obs.port
    try:
        status, plain = await get(obs.port, "/")
        assert status == 200 and b'id="fleet"' not in plain and b"/fleet" not in plain
        server.fleet_status = fleet_document
        status, raw = await get(obs.port, "/")
        assert status == 200
    finally:
        await obs.close()
    page = raw.decode()
    section = page[page.index('id="fleet"') : page.index("</section>")]
    assert "<a href=/fleet>fleet</a>" in page
    assert "not ready" in section  # the document's ready is False
    for fact in (ME, "groupcoord-fleet", "__groupcoord_state", "generation <b>7</b>",
                 "fleet rebalances <b>3</b>",
                 "2 serving · 1 loading · 2 remote · 1 fenced"):  # fmt: skip
        assert fact in section, fact
    assert "Members (2)" in section
    assert f"<b>{ME}</b> (this) 3 partitions" in section
    assert f"<b>{OTHER}</b> 2 partitions" in section
    assert fleet_table_rows(page) == [
        # partition, status, owner, epoch, load, groups: load and groups of served ones only
        ["0", "serving", f"{ME} (this)", "7", "0.125 s", "3"],
        ["1", "serving", f"{ME} (this)", "7", "0.500 s", "0"],
        ["2", "loading", f"{ME} (this)", "7", "-", "-"],
        ["3", "remote", OTHER, "-", "-", "-"],
        ["4", "remote", OTHER, "-", "-", "-"],
        ["5", "fenced", "-", "8", "-", "-"],
    ]
    assert 'title="loaded at 2023-11-14T22:13:20Z"' in section


def test_fleet_section_escapes_addresses_and_errors() -> None:
    document = fleet_document()
    hostile = '<img src=x onerror="alert(1)">:9094'
    document["members"] = [ME, hostile]
    document["partitions"][3]["owner"] = hostile
    document["error"] = "<script>boom</script>"
    document["ready"] = True
    summary = {"ready": True, "connections": 0, "advertised": "127.0.0.1:9092"}
    page = render_html(summary, [], 0.0, fleet=document)
    assert "<img" not in page and "<script>" not in page
    assert "&lt;img src=x" in page and "error <b>&lt;script&gt;boom&lt;/script&gt;</b>" in page
    assert '<span class="state serving">ready</span>' in page


def test_fleet_counts_cover_every_status() -> None:
    document = fleet_document()
    assert fleet_counts(document) == {
        "serving": 2, "loading": 1, "remote": 2, "fenced": 1, "unassigned": 0,
    }  # fmt: skip
    assert tuple(fleet_counts({"partitions": []})) == FLEET_STATUSES
    empty = copy.deepcopy(document)
    empty["partitions"] = []
    empty["members"] = []
    page = render_html({"ready": False, "connections": 0, "advertised": "h:1"}, [], 0.0,
                       fleet=empty)  # fmt: skip
    assert "partitions <b>none</b>" in page and "none yet" in page
