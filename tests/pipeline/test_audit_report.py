"""The audit's report renderer and command-line parsing, without Spark: a self-contained page
whose charts carry one bar per value, and whose text is escaped."""

from __future__ import annotations

import re

import pytest

from pipeline import report
from pipeline.cli import parse_time

DATA = {
    "generated_ms": 1_735_700_000_000,
    "multi_coordinator": True,
    "inputs": ["/data/a", "/data/b"],
    "filters": {"groups": ["<g&1>"], "since_ms": 1_735_689_600_000, "until_ms": None},
    "totals": {
        "events": 1234,
        "coordinators": 2,
        "groups": 3,
        "first_ms": 1_735_689_600_000,
        "last_ms": 1_735_689_600_000 + 3 * 3_600_000,
        "rebalances": 7,
        "rebalancing_ms": 12_345,
        "p50_ms": 800,
        "p90_ms": 3_000,
        "p99_ms": 9_000,
        "max_ms": 9_500,
        "sessions": 9,
        "abnormal_leaves": 2,
    },
    "timeline": {
        "bin_ms": 900_000,
        "first_ms": 1_735_689_600_000,
        "last_ms": 1_735_689_600_000 + 3 * 3_600_000,
        "series": {
            "<g&1> @ abcdef12": [[1_735_689_600_000, 2], [1_735_689_600_000 + 900_000, 1]],
            "other @ 12345678": [[1_735_689_600_000, 3], [1_735_689_600_000 + 7_200_000, 1]],
        },
    },
    "durations": [[0, 10, 0], [10, 30, 2], [30, 100, 5], [100, None, 0]],
    "causes": [
        {"cause": "member_joined", "count": 5, "total_ms": 100},
        {"cause": "session_expired", "count": 2, "total_ms": 50},
    ],
    "clients": [
        {"client": "svc-<a>", "sessions": 4, "leaves": 3, "abnormal": 2, "triggered": 5,
         "hosts": 1, "groups": 1, "churn": 7},
        {"client": "svc-b", "sessions": 1, "leaves": 0, "abnormal": 0, "triggered": 1,
         "hosts": 1, "groups": 1, "churn": 1},
    ],
    "groups": [
        {"coordinator_id": "abcdef12-0000", "group_id": "<g&1>", "rebalances": 4,
         "rebalancing_ms": 1000, "churn": 5, "abnormal_leaves": 1, "max_daily_members": 3,
         "commits": 10},
    ],
    "slowest": [
        {"coordinator_id": "abcdef12-0000", "group_id": "<g&1>", "generation_id": 3,
         "cause": "member_joined", "trigger_client_id": None, "start_ms": 1_735_689_600_000,
         "duration_ms": 9_500, "restarts": 1, "members_before": None, "members_after": 2},
    ],
}  # fmt: skip


def bars(page: str, chart_id: str) -> list[str]:
    match = re.search(rf'<svg[^>]*id="{chart_id}".*?</svg>', page, re.S)
    assert match, chart_id
    return re.findall(r'<rect class="bar"[^>]*><title>([^<]*)</title>', match.group(0))


def test_render_is_self_contained_escaped_and_plots_every_value() -> None:
    page = report.render(DATA)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "<link" not in page and "src=" not in page
    assert "<g&1>" not in page and "&lt;g&amp;1&gt;" in page  # group names are text, never markup
    # Timeline: 15-minute bins over 3 hours, one rect per non-zero (bin, group).
    assert len(bars(page, "chart-timeline")) == 4
    assert "&lt;g&amp;1&gt; @ abcdef12: 2 (" in page
    assert len(bars(page, "chart-durations")) == 2  # zero buckets draw nothing
    assert bars(page, "chart-causes") == [
        "member_joined: 5 rebalances",
        "session_expired: 2 rebalances",
    ]
    clients = bars(page, "chart-clients")
    assert "svc-&lt;a&gt;: 5 joins + clean leaves" in clients
    assert "svc-&lt;a&gt;: 2 expired / fenced / dropped" in clients
    assert "svc-b: 1 joins + clean leaves" in clients
    assert "? → 2" in page  # members before unknown


def test_render_with_no_data_still_renders() -> None:
    page = report.render({"totals": {}, "timeline": {}, "durations": [], "causes": []})
    assert 'id="chart-timeline"' in page and "none" in page


def test_nice_ticks_and_formats() -> None:
    assert report.nice_ticks(7) == [0, 2, 4, 6, 8]
    assert report.nice_ticks(1) == [0, 1]
    assert report.nice_ticks(120) == [0, 50, 100, 150]
    assert report.nice_ticks(0) == [0, 1]
    assert report.fmt_ms(850) == "850 ms" and report.fmt_ms(2_300) == "2.3 s"
    assert report.fmt_ms(150_000) == "2.5 min" and report.fmt_ms(None) == "-"


def test_parse_time() -> None:
    assert parse_time("2025-01-01") == 1_735_689_600_000
    assert parse_time("2025-01-01T01:00:00Z") == 1_735_693_200_000
    assert parse_time("2025-01-01T02:00:00+01:00") == 1_735_693_200_000
    assert parse_time("90m", now_ms=10_000_000) == 10_000_000 - 5_400_000
    assert parse_time("7d", now_ms=10**12) == 10**12 - 7 * 86_400_000
    with pytest.raises(ValueError, match="ISO date"):
        parse_time("yesterday")
