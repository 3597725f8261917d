"""Who and why (issue 24) with real clients: the status page and /groups/<id> name the trigger and
cause of every rebalance, show per-partition committed offset, end offset and lag and the members
with their assignments, checked in headless Chromium against DescribeGroups, OffsetFetch and
ListOffsets; the list of recent rebalances survives a restart (read back from the history log);
the filter box hides the groups that do not match.

The scenario (confluent-kafka members, one group, 12 partitions; offsets 0 and 3 committed while
the group is still empty):
  who-a, who-b, who-c join   -> member_joined x3, each naming its joiner
  who-b closes (LeaveGroup)  -> member_left, naming who-b
  who-c is SIGKILLed         -> session_expired, naming who-c
  who-a closes               -> member_left, naming who-a (the group is Empty)
  the server restarts on the same data dir -> the same six rebalances, triggers included.
"""

from __future__ import annotations

import asyncio
import html.parser
import json
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support import browser
from tests.support.realclients import (
    PARTITIONS,
    REPO,
    Broker,
    assert_stable_and_described,
    can_connect,
    explain_members,
    free_port,
    groupcoord_command,
    partition_of,
    wait_until,
)

pytestmark = pytest.mark.clients

GROUP = "who & <why>"  # escaped on the page, verbatim in JSON
OTHER = "unrelated-group"
SESSION_MS = 4_000
COMMITTED = {0: 5, 3: 7}
OPTIONS = {"initial_rebalance_delay_ms": 0, "session_timeout_min_ms": 1000,
           "session_timeout_max_ms": 300000}  # fmt: skip


def http_get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def group_json(port: int, group: str) -> dict[str, Any] | None:
    status, body = http_get(port, "/groups/" + urllib.parse.quote(group, safe=""))
    return json.loads(body) if status == 200 else None


def commit_simple(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    """OffsetCommit from a consumer that never joins (generation -1) while the group is empty."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "log_level": 3})  # fmt: skip
    try:
        c.commit(offsets=[TopicPartition("orders", p, o) for p, o in offsets.items()],
                 asynchronous=False)  # fmt: skip
    finally:
        c.close()


def offset_fetch_and_list_offsets(bootstrap: str, group: str) -> dict[int, tuple[int | None, int]]:
    """partition -> (committed offset or None, high watermark): OffsetFetch and ListOffsets asked
    by confluent-kafka (a consumer that never joins)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "log_level": 3})  # fmt: skip
    try:
        tps = [TopicPartition("orders", p) for p in range(PARTITIONS)]
        committed = {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
        out = {}
        for tp in tps:
            _low, high = c.get_watermark_offsets(tp, timeout=10, cached=False)
            offset = committed[tp.partition]
            out[tp.partition] = (offset if offset >= 0 else None, high)
        return out
    finally:
        c.close()


class PageTables(html.parser.HTMLParser):
    """Per group section (data-group): whether it is hidden, and the rows (cell texts) of each of
    its tables by class: members, offsets, rebalances."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden: dict[str, bool] = {}
        self.tables: dict[str, dict[str, list[list[str]]]] = {}
        self._group: str | None = None
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("data-group") is not None:
            self._group = a["data-group"]
            self.hidden[self._group] = "hidden" in a
            self.tables[self._group] = {}
        elif tag == "table" and self._group is not None:
            self._table = a.get("class") or ""
            self.tables[self._group].setdefault(self._table, [])
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row and self._group is not None and self._table is not None:
                self.tables[self._group][self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "section":
            self._group = None


async def page_tables(port: int, query: str = "") -> tuple[str, PageTables]:
    url = f"http://127.0.0.1:{port}/" + (f"?q={urllib.parse.quote(query)}" if query else "")
    dom = await asyncio.to_thread(browser.dump_dom, url)
    parser = PageTables()
    parser.feed(dom)
    return dom, parser


def rebalance_view(group: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(r["generation_id"], r["cause"], r["trigger"] and r["trigger"]["member_id"],
             r["trigger"] and r["trigger"]["client_id"], r["members"], r["duration_ms"],
             r["join_ms"], r["sync_ms"]) for r in group["rebalances"]]  # fmt: skip


async def test_who_and_why_on_the_status_page_and_after_a_restart(server, members, tmp_path):
    if browser.chromium() is None:
        pytest.skip(browser.MISSING)
    mport = free_port()
    broker: Broker = server(topics={"orders": PARTITIONS}, metrics_listen=f"127.0.0.1:{mport}")
    await asyncio.to_thread(commit_simple, broker.bootstrap, GROUP, COMMITTED)
    await asyncio.to_thread(commit_simple, broker.bootstrap, OTHER, {1: 1})
    opts = {"bootstrap": broker.bootstrap, "group": GROUP, "topic": "orders",
            "session_timeout_ms": SESSION_MS}  # fmt: skip
    ms = []
    for name in ("who-a", "who-b", "who-c"):
        ms.append(await members("confluent", name, **opts))
        await assert_stable_and_described(broker, GROUP, ms)
    a, b, c = ms
    ids = {m.name: m.member_id for m in ms}
    await b.close()  # LeaveGroup
    await assert_stable_and_described(broker, GROUP, [a, c])
    c.kill()  # no LeaveGroup: its session expires
    await c.proc.wait()
    await wait_until(lambda: partition_of([a], PARTITIONS), SESSION_MS / 1000 + 20,
                     "who-a to own every partition", explain=lambda: explain_members(ms, broker))
    view = await assert_stable_and_described(broker, GROUP, [a])

    def completed(n: int) -> dict[str, Any] | None:
        g = group_json(mport, GROUP)
        return g if g is not None and len(g["rebalances"]) >= n else None

    g = await wait_until(lambda: completed(5), 20, "five rebalances on /groups/<id>")
    expected = [  # newest first
        ("session_expired", "who-c"),
        ("member_left", "who-b"),
        ("member_joined", "who-c"),
        ("member_joined", "who-b"),
        ("member_joined", "who-a"),
    ]
    got = [(r["cause"], r["trigger"]["client_id"]) for r in g["rebalances"]]
    assert got == expected, g["rebalances"]
    for r, (_, who) in zip(g["rebalances"], expected, strict=True):
        t = r["trigger"]
        assert (t["member_id"], t["client_host"], t["topics"]) == (ids[who], "/127.0.0.1", [])

    # Members and assignments: as DescribeGroups says.
    assert {m["member_id"]: frozenset(m["assignment"]["orders"]) for m in g["members"]} == \
        view.members  # fmt: skip
    # Offsets: as OffsetFetch and ListOffsets say (standalone: empty partitions, end offset 0).
    fetched = await asyncio.to_thread(offset_fetch_and_list_offsets, broker.bootstrap, GROUP)
    assert {p: o for p, (o, _) in fetched.items() if o is not None} == COMMITTED
    rows = {o["partition"]: o for o in g["offsets"] if o["topic"] == "orders"}
    assert set(rows) == set(range(PARTITIONS))
    for p, (offset, high) in fetched.items():
        row = rows[p]
        assert (row["committed_offset"], row["end_offset"]) == (offset, high), row
        assert row["lag"] == (None if offset is None else max(0, high - offset)), row
        assert row["member_id"] == a.member_id

    # The page, as Chromium renders it, shows the same.
    dom, page = await page_tables(mport)
    assert "who &amp; &lt;why&gt;" in dom and "<why>" not in dom
    tables = page.tables[GROUP]
    shown = [(row[1], row[2]) for row in tables["rebalances"]]
    assert shown == [(cause, f"{who} @ /127.0.0.1") for cause, who in expected]
    offsets = {int(row[1]): row for row in tables["offsets"]}
    for p, (offset, high) in fetched.items():
        lag = "-" if offset is None else str(max(0, high - offset))
        committed = "-" if offset is None else str(offset)
        assert offsets[p] == ["orders", str(p), "who-a", committed, str(high), lag]
    (member_row,) = tables["members"]
    assert member_row[0] == "who-a (leader)"
    assert member_row[2] == "orders: " + ", ".join(map(str, range(PARTITIONS)))

    # The filter box: the text in ?q= hides the groups that do not contain it (the script runs).
    dom, filtered = await page_tables(mport, "WHO &")
    assert filtered.hidden == {GROUP: False, OTHER: True}
    assert "1 of 2 groups" in dom
    _, unfiltered = await page_tables(mport)
    assert unfiltered.hidden == {GROUP: False, OTHER: False}

    await a.close()  # the last member leaves: the group is Empty
    g = await wait_until(lambda: completed(6), 20, "the sixth rebalance",
                         explain=lambda: f"{group_json(mport, GROUP)}")
    assert (g["rebalances"][0]["cause"], g["rebalances"][0]["trigger"]["client_id"]) == (
        "member_left", "who-a")  # fmt: skip
    before = rebalance_view(g)

    # Restart on the same data dir: the recent rebalances come back from the history log.
    broker.proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(broker.proc.wait, 30) == 0, broker.log_tail()
    port, mport2 = free_port(), free_port()
    cmd = groupcoord_command(port, broker.data_dir, {"orders": PARTITIONS},
                             {**OPTIONS, "metrics_listen": f"127.0.0.1:{mport2}"}, [])  # fmt: skip
    log_path = Path(tmp_path) / "restarted.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=REPO,
                                start_new_session=True)  # fmt: skip
    try:
        await wait_until(lambda: proc.poll() is None and can_connect("127.0.0.1", mport2), 20,
                         "the restarted server's HTTP port",
                         explain=log_path.read_text)  # fmt: skip

        def restored() -> dict[str, Any] | None:
            g = group_json(mport2, GROUP)
            return g if g is not None and g["rebalances"] else None

        g2 = await wait_until(restored, 20, "the restarted server's /groups/<id>",
                              explain=log_path.read_text)  # fmt: skip
        assert rebalance_view(g2) == before
        assert g2["state"] == "Empty" and g2["members"] == []
        _, page2 = await page_tables(mport2)
        shown = [(row[1], row[2]) for row in page2.tables[GROUP]["rebalances"]]
        assert shown == [("member_left", "who-a @ /127.0.0.1"),
                         *[(cause, f"{who} @ /127.0.0.1") for cause, who in expected]]  # fmt: skip
        assert "read back 6 recent rebalance(s) of 1 group(s)" in log_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
