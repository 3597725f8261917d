"""Issue 5 with real clients: /metrics after a scripted scenario, the status page in headless
Chromium, /groups against DescribeGroups, /healthz and /readyz of a real process.

The scenario (confluent-kafka members, one group, 12 partitions):
  a joins              -> rebalance member_joined        (generation 1)
  b joins              -> rebalance member_joined        (generation 2)
  b closes (LeaveGroup)-> rebalance member_left          (generation 3)
  c joins              -> rebalance member_joined        (generation 4)
  c is SIGKILLed       -> rebalance session_expired      (generation 5), after c's session timeout
  3 offsets are committed for another group (a simple consumer, generation -1).
Each step waits for the clients to converge and for the server to have completed the rebalance;
the end asserts exact deltas against a scrape taken before the scenario.
"""

from __future__ import annotations

import asyncio
import html.parser
import json
import re
import urllib.request
from typing import Any

import pytest

from coordinator.core.events import RebalanceCause
from tests.support import browser
from tests.support.realclients import (
    PARTITIONS,
    Broker,
    assert_stable_and_described,
    explain_members,
    free_port,
    partition_of,
    wait_until,
)

pytestmark = pytest.mark.clients

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def http_get(port: int, path: str, timeout: float = 10) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def scrape(port: int) -> Samples:
    from prometheus_client.parser import text_string_to_metric_families

    status, ctype, body = http_get(port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[s.name, frozenset(s.labels.items())] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def start_with_metrics(server: Any, *extra: str, **options: Any) -> tuple[Broker, int]:
    port = free_port()
    broker = server(topics={"orders": PARTITIONS}, metrics_listen=f"127.0.0.1:{port}",
                    extra=list(extra), **options)
    return broker, port


CAUSES = tuple(cause.value for cause in RebalanceCause)


def commit_simple(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    """OffsetCommit from a consumer that never joins (generation -1: a 'simple' group)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "log_level": 3})
    try:
        c.commit(offsets=[TopicPartition("orders", p, o) for p, o in offsets.items()],
                 asynchronous=False)
    finally:
        c.close()


async def test_metrics_count_a_scripted_scenario_exactly(server, members):
    broker, mport = start_with_metrics(server, "--metrics-per-group")
    before = scrape(mport)
    group = "observed"
    opts = {"bootstrap": broker.bootstrap, "group": group, "topic": "orders",
            "session_timeout_ms": 10000, "heartbeat_interval_ms": 300}
    completed = 0

    async def step(ms: list[Any], what: str, timeout: float = 40) -> None:
        nonlocal completed
        completed += 1
        await wait_until(lambda: partition_of(ms, PARTITIONS), timeout, f"{what}: partitions split",
                         explain=lambda: explain_members(ms, broker))
        await wait_until(
            lambda: delta(scrape(mport), before, "groupcoord_rebalance_duration_seconds_count")
            >= completed,
            timeout, f"{what}: rebalance #{completed} completed",
            explain=lambda: broker.log_tail(30))

    a = await members("confluent", "obs-a", **opts)
    await step([a], "a joins")
    b = await members("confluent", "obs-b", **opts)
    await step([a, b], "b joins")
    await b.close()
    await step([a], "b leaves")
    c = await members("confluent", "obs-c", **{**opts, "session_timeout_ms": 3000})
    await step([a, c], "c joins")
    c.kill()
    await c.proc.wait()
    await step([a], "c expires")
    await asyncio.to_thread(commit_simple, broker.bootstrap, "offsets-only", {0: 42, 1: 43, 5: 7})
    await assert_stable_and_described(broker, group, [a])

    after = scrape(mport)
    got = {cause: delta(after, before, "groupcoord_rebalances_total", cause=cause)
           for cause in CAUSES}
    expected = dict.fromkeys(CAUSES, 0.0)
    expected.update(member_joined=3, member_left=1, session_expired=1)
    rebalance_lines = [line for line in broker.log_tail(400).splitlines()
                       if "rebalance completed" in line]
    why = "\n".join(rebalance_lines)
    assert got == expected, why
    completed_by_cause = {cause: delta(after, before, "groupcoord_rebalances_completed_total",
                                       cause=cause) for cause in CAUSES}
    assert completed_by_cause == expected, why
    # The duration histogram counted each rebalance exactly once; so did the phase histograms.
    assert delta(after, before, "groupcoord_rebalance_duration_seconds_count") == 5, why
    assert delta(after, before, "groupcoord_rebalance_join_phase_seconds_count") == 5
    assert delta(after, before, "groupcoord_rebalance_sync_phase_seconds_count") == 5
    assert value(after, "groupcoord_rebalance_duration_seconds_bucket", le="+Inf") == 5
    # The expiry waited for c's 3 s session: that rebalance took at least that long to start,
    # but its duration runs from PreparingRebalance, so it is short; all five sum to < 60 s.
    assert 0 < delta(after, before, "groupcoord_rebalance_duration_seconds_sum") < 60
    assert delta(after, before, "groupcoord_session_expirations_total") == 1
    assert delta(after, before, "groupcoord_member_leaves_total", reason="left") == 1
    assert delta(after, before, "groupcoord_member_leaves_total", reason="expired") == 1
    assert delta(after, before, "groupcoord_member_joins_total") == 3
    assert delta(after, before, "groupcoord_member_fencings_total") == 0
    assert delta(after, before, "groupcoord_offset_commits_total") == 3
    assert delta(after, before, "groupcoord_requests_total", api="OffsetCommit", error="NONE") == 1
    assert delta(after, before, "groupcoord_groups_created_total") == 2
    assert delta(after, before, "groupcoord_requests_total", api="LeaveGroup", error="NONE") == 1
    heartbeats = value(after, "groupcoord_heartbeats_total")
    by_error = sum(v for (name, labels), v in after.items()
                   if name == "groupcoord_requests_total" and ("api", "Heartbeat") in labels)
    assert heartbeats > 0 and by_error == heartbeats
    # Levels: one stable consumer group with one member, the simple group Empty.
    assert value(after, "groupcoord_groups", state="Stable", protocol_type="consumer") == 1
    assert value(after, "groupcoord_groups", state="Empty", protocol_type="none") == 1
    assert value(after, "groupcoord_members") == 1
    assert value(after, "groupcoord_log_appended_records_total") > 0
    assert value(after, "groupcoord_log_fsync_seconds_count") > 0
    assert value(after, "groupcoord_log_size_bytes") > 0
    assert value(after, "groupcoord_log_segments") >= 1
    # Per-group series (--metrics-per-group).
    assert value(after, "groupcoord_group_generation", group=group) == 5
    assert value(after, "groupcoord_group_members", group=group) == 1
    assert value(after, "groupcoord_group_state", group=group, state="Stable") == 1
    assert value(after, "groupcoord_group_committed_offset", group="offsets-only",
                 topic="orders", partition="0") == 42
    assert value(after, "groupcoord_group_last_rebalance_seconds", group=group) > 0
    # One log line per rebalance, with group, generation, cause, members and duration.
    ours = [line for line in rebalance_lines if f"group_id={group} " in line]
    causes = [m.group(1) for line in ours if (m := re.search(r"cause=(\w+)", line))]
    assert causes == ["member_joined", "member_joined", "member_left", "member_joined",
                      "session_expired"], why
    assert all(re.search(r"generation_id=\d+ .*members=\d+ duration_ms=\d+", line)
               for line in ours), why


async def test_default_metrics_have_no_per_group_series(server, members):
    broker, mport = start_with_metrics(server)
    a = await members("confluent", "solo", bootstrap=broker.bootstrap, group="quiet",
                      topic="orders")
    await assert_stable_and_described(broker, "quiet", [a])
    samples = scrape(mport)
    assert value(samples, "groupcoord_members") == 1
    assert not [k for k in samples if k[0].startswith("groupcoord_group_")]
    assert not [k for k in samples if any(name == "group" for name, _ in k[1])]


class _MemberRows(html.parser.HTMLParser):
    """The member rows of the status page: {data-label: text} per <tr> of a members table."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: dict[str, list[dict[str, str]]] = {}
        self._group: str | None = None
        self._in_members = False
        self._row: dict[str, str] | None = None
        self._label: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and (a.get("id") or "").startswith("group-"):
            self._group = (a["id"] or "")[len("group-"):]
            self.groups[self._group] = []
        elif tag == "table":
            self._in_members = "members" in (a.get("class") or "")
        elif tag == "tr" and self._in_members and self._group is not None:
            self._row = {}
        elif tag == "td" and self._row is not None:
            self._label = a.get("data-label")
            self._row[self._label or ""] = ""

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._label is not None:
            self._row[self._label] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._label = None
        elif tag == "tr" and self._row is not None:
            if self._row and self._group is not None:
                self.groups[self._group].append(self._row)
            self._row = None
        elif tag == "table":
            self._in_members = False


async def test_status_page_in_chromium_and_groups_json_match_describe_groups(server, members):
    if browser.chromium() is None:
        pytest.skip(browser.MISSING)
    broker, mport = start_with_metrics(server)
    group = "shown <on> page & json"  # escaped on the page, verbatim in JSON
    ms = [await members(kind, f"{kind}-viewer", bootstrap=broker.bootstrap, group=group,
                        topic="orders")
          for kind in ("confluent", "aiokafka", "kafka-python")]
    view = await assert_stable_and_described(broker, group, ms)

    status, ctype, body = http_get(mport, "/groups")
    assert status == 200 and ctype == "application/json"
    listed = {g["group_id"]: g for g in json.loads(body)}
    g = listed[group]
    assert g["state"].upper() == view.state == "STABLE"
    assert g["protocol_type"] == "consumer" and g["protocol"] == view.protocol
    as_json = {m["member_id"]: frozenset(m["assignment"].get("orders", ())) for m in g["members"]}
    assert as_json == view.members
    assert {m["member_id"]: m["client_id"] for m in g["members"]} == view.client_ids
    assert {m["client_host"] for m in g["members"]} == {"/127.0.0.1"}
    assert g["rebalances"] and g["rebalances"][0]["generation_id"] == g["generation_id"]
    one = json.loads(http_get(mport, "/groups/" + urllib.parse.quote(group, safe=""))[2])
    assert one["members"] == g["members"]

    dom = await asyncio.to_thread(browser.dump_dom, f"http://127.0.0.1:{mport}/")
    assert dom.count("<script") == 1  # only the page's own group filter (issue 24)
    parser = _MemberRows()
    parser.feed(dom)
    escaped = "shown &lt;on&gt; page &amp; json"
    assert escaped in dom
    rows = parser.groups.get(group)
    assert rows is not None, f"group section missing; sections: {list(parser.groups)}"
    shown = {r["client id"].removesuffix(" (leader)"): r["partitions"] for r in rows}
    expected = {view.client_ids[mid]: "orders: " + ", ".join(map(str, sorted(parts)))
                for mid, parts in view.members.items()}
    assert shown == expected
    assert sum(" (leader)" in r["client id"] for r in rows) == 1
    assert all(r["host"] == "/127.0.0.1" for r in rows)


async def test_healthz_and_readyz_of_a_running_server(server):
    _broker, mport = start_with_metrics(server)
    assert http_get(mport, "/healthz")[:2] == (200, "text/plain")
    status, _, body = http_get(mport, "/readyz")
    assert (status, body) == (200, b"ready\n")
    assert http_get(mport, "/nope")[0] == 404
    status, ctype, page = http_get(mport, "/")
    assert status == 200 and ctype.startswith("text/html") and b"No groups." in page
