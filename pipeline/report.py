"""The audit's HTML report: one self-contained file, plots drawn as inline SVG, no scripts.

It opens from the file system in any browser (no server, no network, no plotting library): the
charts are SVG elements written here, text is HTML-escaped, times are UTC.

`render(data)` takes the plain dict pipeline/report_data.py collects:
    totals      events, coordinators, groups, first_ms, last_ms, rebalances, rebalancing_ms,
                p50_ms, p90_ms, p99_ms, max_ms, sessions, abnormal_leaves
    timeline    bin_ms, first_ms, last_ms, series {label: [[bin_start_ms, count], ...]}
    durations   [[low_ms, high_ms | None, count], ...]
    causes      [{cause, count, total_ms}]
    clients     [{client, sessions, leaves, abnormal, triggered, hosts, groups, churn}]
    groups      [{coordinator_id, group_id, rebalances, rebalancing_ms, churn, abnormal_leaves,
                  max_daily_members, commits}]
    slowest     [{coordinator_id, group_id, generation_id, cause, trigger_member_id,
                  trigger_client_id, trigger_client_host, trigger_topics, start_ms, duration_ms,
                  restarts, members_before, members_after}] (the trigger_* keys but
                  trigger_client_id may be missing: "triggered by" uses what is there)
    filters, inputs, generated_ms, multi_coordinator
Each chart is an `<svg class="chart" id="chart-...">`; every bar carries a `<title>` (a tooltip).
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
)
CLEAN, ABNORMAL_COLOR = "#4e79a7", "#e15759"
WIDTH = 880


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms < 1_000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def fmt_time(ms: int | None, width_ms: int = 60_000) -> str:
    if ms is None:
        return "-"
    pattern = "%Y-%m-%d" if width_ms >= 86_400_000 else "%m-%d %H:%M"
    if width_ms < 60_000:
        pattern = "%H:%M:%S"
    return time.strftime(pattern, time.gmtime(ms / 1000))


def fmt_full_time(ms: int | None) -> str:
    return "-" if ms is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """0 and whole round steps (1, 2, 5 x 10^k) up to at least `top` (the charts show counts)."""
    if top <= 0:
        return [0, 1]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = max(1, next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))
    return [float(i * step) for i in range(math.ceil(top / step) + 1)]


def _num(v: float) -> str:
    return f"{v:g}" if v < 1e6 else f"{v:,.0f}"


# -- charts ---------------------------------------------------------------------------------------


def _svg(chart_id: str, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg class="chart" id="{esc(chart_id)}" role="img" aria-label="{esc(label)}" '
        f'xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}">' + "".join(body) + "</svg>"
    )


def _y_axis(body: list[str], ticks: list[float], x0: int, x1: int, y_of: Any) -> None:
    for t in ticks:
        y = y_of(t)
        body.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}"/>')
        body.append(
            f'<text class="tick" x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{_num(t)}</text>'
        )


def stacked_bars(
    chart_id: str,
    categories: Sequence[str],
    series: Mapping[str, Sequence[float]],
    *,
    label: str,
    unit: str = "",
    height: int = 300,
) -> str:
    """Vertical bars, one per category, stacked by series (legend below the plot)."""
    left, right, top, bottom = 56, 16, 14, 60
    legend_rows = math.ceil(len(series) / 3) if len(series) > 1 else 0
    total_h = height + legend_rows * 18
    plot_w, plot_h = WIDTH - left - right, height - top - bottom
    sums = [sum(values[i] for values in series.values()) for i in range(len(categories))]
    ticks = nice_ticks(max(sums, default=0))
    y_max = ticks[-1] or 1

    def y_of(v: float) -> float:
        return top + plot_h - v / y_max * plot_h

    body: list[str] = []
    _y_axis(body, ticks, left, left + plot_w, y_of)
    n = max(len(categories), 1)
    slot = plot_w / n
    bar_w = max(min(slot * 0.8, 60), 1)
    every = max(1, math.ceil(n / 12))  # at most ~12 category labels
    for i, cat in enumerate(categories):
        x = left + i * slot + (slot - bar_w) / 2
        base = 0.0
        for k, (name, values) in enumerate(series.items()):
            v = values[i]
            if v <= 0:
                continue
            y1, y0 = y_of(base + v), y_of(base)
            color = PALETTE[k % len(PALETTE)]
            tip = (
                f"{name}: {_num(v)}{unit} ({cat})" if len(series) > 1 else f"{cat}: {_num(v)}{unit}"
            )
            body.append(
                f'<rect class="bar" x="{x:.1f}" y="{y1:.1f}" width="{bar_w:.1f}" '
                f'height="{max(y0 - y1, 0.5):.1f}" fill="{color}"><title>{esc(tip)}</title></rect>'
            )
            base += v
        if i % every == 0:
            cx = x + bar_w / 2
            body.append(
                f'<text class="tick" x="{cx:.1f}" y="{top + plot_h + 16}" '
                f'text-anchor="middle">{esc(cat)}</text>'
            )
    body.append(
        f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" '
        f'y2="{top + plot_h}"/>'
    )
    if legend_rows:
        for k, name in enumerate(series):
            lx = left + (k % 3) * (plot_w / 3)
            ly = height - 18 + (k // 3) * 18
            body.append(
                f'<rect class="key" x="{lx:.1f}" y="{ly}" width="12" height="12" '
                f'fill="{PALETTE[k % len(PALETTE)]}"/>'
                f'<text class="legend" x="{lx + 18:.1f}" y="{ly + 11}">{esc(name)}</text>'
            )
    return _svg(chart_id, total_h, body, label)


def horizontal_bars(
    chart_id: str,
    labels: Sequence[str],
    parts: Mapping[str, Sequence[float]],
    *,
    label: str,
    colors: Sequence[str] = PALETTE,
) -> str:
    """One horizontal bar per label, split into `parts` (e.g. clean vs abnormal leaves)."""
    left, right, top, row_h = 230, 70, 24, 24
    height = top + max(len(labels), 1) * row_h + 10
    plot_w = WIDTH - left - right
    totals = [sum(p[i] for p in parts.values()) for i in range(len(labels))]
    x_max = max(totals, default=0) or 1
    body: list[str] = []
    for k, name in enumerate(parts):
        lx = left + k * 160
        color = colors[k % len(colors)]
        body.append(
            f'<rect class="key" x="{lx}" y="4" width="12" height="12" fill="{color}"/>'
            f'<text class="legend" x="{lx + 18}" y="15">{esc(name)}</text>'
        )
    for i, name in enumerate(labels):
        y = top + i * row_h
        short = name if len(name) <= 32 else name[:31] + "…"
        body.append(
            f'<text class="tick" x="{left - 8}" y="{y + 15}" text-anchor="end">{esc(short)}</text>'
        )
        x = float(left)
        for k, (part, values) in enumerate(parts.items()):
            v = values[i]
            if v <= 0:
                continue
            w = v / x_max * plot_w
            tip = esc(f"{name}: {_num(v)} {part}")
            body.append(
                f'<rect class="bar" x="{x:.1f}" y="{y + 3}" width="{max(w, 0.5):.1f}" '
                f'height="{row_h - 6}" fill="{colors[k % len(colors)]}"><title>{tip}</title></rect>'
            )
            x += w
        body.append(f'<text class="value" x="{x + 6:.1f}" y="{y + 15}">{_num(totals[i])}</text>')
    return _svg(chart_id, height, body, label)


# -- the page -------------------------------------------------------------------------------------


def timeline_chart(timeline: dict[str, Any]) -> str:
    width = int(timeline.get("bin_ms") or 60_000)
    series_in: dict[str, list[list[int]]] = timeline.get("series") or {}
    first, last = timeline.get("first_ms"), timeline.get("last_ms")
    if first is None or last is None or not series_in:
        bins: list[int] = []
    else:
        start = int(first) // width * width
        bins = list(range(start, int(last) // width * width + width, width))
    index = {b: i for i, b in enumerate(bins)}
    series: dict[str, list[float]] = {}
    for name, points in series_in.items():
        values = [0.0] * len(bins)
        for b, count in points:
            if b in index:
                values[index[b]] += count
        series[name] = values
    categories = [fmt_time(b, width) for b in bins]
    return stacked_bars(
        "chart-timeline", categories, series, label="rebalances over time per group"
    )


def durations_chart(durations: list[list[Any]]) -> str:
    cats = []
    for low, high, _ in durations:
        cats.append(f"≥ {fmt_ms(low)}" if high is None else f"< {fmt_ms(high)}")
    values = [float(c) for _, _, c in durations]
    return stacked_bars(
        "chart-durations", cats, {"rebalances": values}, label="rebalance duration distribution"
    )


def clients_chart(clients: list[dict[str, Any]]) -> str:
    labels = [str(c["client"]) for c in clients]
    abnormal = [float(c["abnormal"] or 0) for c in clients]
    clean = [float((c["churn"] or 0) - (c["abnormal"] or 0)) for c in clients]
    return horizontal_bars(
        "chart-clients",
        labels,
        {"joins + clean leaves": clean, "expired / fenced / dropped": abnormal},
        label="top churning clients",
        colors=(CLEAN, ABNORMAL_COLOR),
    )


def triggered_by(r: dict[str, Any]) -> str:
    """A rebalance's trigger in one line: the member's client (and host), else its member id, else
    the topics of a topic change; "-" when nothing is known."""
    client = r.get("trigger_client_id")
    if client:
        host = r.get("trigger_client_host")
        return f"{client} @ {host}" if host else str(client)
    if r.get("trigger_member_id"):
        return str(r["trigger_member_id"])
    topics = r.get("trigger_topics")
    if topics:
        return "topic " + ", ".join(topics)
    return "-"


def causes_chart(causes: list[dict[str, Any]]) -> str:
    return horizontal_bars(
        "chart-causes",
        [str(c["cause"]) for c in causes],
        {"rebalances": [float(c["count"]) for c in causes]},
        label="rebalances by cause",
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], table_id: str) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in row) + "</tr>" for row in rows)
    if not rows:
        body = f'<tr><td colspan="{len(headers)}" class="empty">none</td></tr>'
    return (
        f'<table id="{esc(table_id)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


def _or_unknown(value: object) -> object:
    return "?" if value is None else value


def _group_name(row: dict[str, Any], multi: bool) -> str:
    name = str(row.get("group_id"))
    return f"{name} @ {str(row.get('coordinator_id'))[:8]}" if multi else name


STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;
max-width:920px;color:#222;padding:0 12px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin:28px 0 6px}
.meta{color:#666;font-size:12px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:120px}
.card b{display:block;font-size:20px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid #eee;padding:4px 6px;text-align:left}
th{background:#f6f6f6}td.empty{color:#888;text-align:center}
svg.chart{display:block;max-width:100%;height:auto}
svg .grid{stroke:#eee}svg .axis{stroke:#999}
svg text{font:11px system-ui,sans-serif;fill:#444}svg .value{fill:#222}
"""


def render(data: dict[str, Any]) -> str:
    totals = data.get("totals") or {}
    multi = bool(data.get("multi_coordinator"))
    filters = data.get("filters") or {}
    cards = [
        ("rebalances", _num(totals.get("rebalances") or 0)),
        ("time rebalancing", fmt_ms(totals.get("rebalancing_ms") or 0)),
        (
            "median / p99 duration",
            f"{fmt_ms(totals.get('p50_ms'))} / {fmt_ms(totals.get('p99_ms'))}",
        ),
        ("groups", _num(totals.get("groups") or 0)),
        ("member sessions", _num(totals.get("sessions") or 0)),
        ("expired / fenced", _num(totals.get("abnormal_leaves") or 0)),
        ("coordinators", _num(totals.get("coordinators") or 0)),
        ("events", _num(totals.get("events") or 0)),
    ]
    scope = [f"{fmt_full_time(totals.get('first_ms'))} to {fmt_full_time(totals.get('last_ms'))}"]
    if filters.get("groups"):
        scope.append("groups: " + ", ".join(filters["groups"]))
    if filters.get("since_ms") is not None:
        scope.append("since " + fmt_full_time(filters["since_ms"]))
    if filters.get("until_ms") is not None:
        scope.append("until " + fmt_full_time(filters["until_ms"]))
    groups = data.get("groups") or []
    slowest = data.get("slowest") or []
    causes = data.get("causes") or []
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>groupcoord rebalance audit</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Rebalance audit</h1>",
        f'<p class="meta">{esc(" · ".join(scope))}<br>inputs: '
        f"{esc(', '.join(data.get('inputs') or []))}<br>generated "
        f"{esc(fmt_full_time(data.get('generated_ms')))} by groupcoord audit</p>",
        '<div class="cards">'
        + "".join(f'<div class="card"><b>{esc(v)}</b>{esc(k)}</div>' for k, v in cards)
        + "</div>",
        "<h2>Rebalances over time, per group</h2>",
        f'<p class="meta">bars of {esc(fmt_ms((data.get("timeline") or {}).get("bin_ms")))}, '
        "by completion time</p>",
        timeline_chart(data.get("timeline") or {}),
        "<h2>How long rebalances took</h2>",
        '<p class="meta">from the first JoinGroup-triggering change to the last SyncGroup '
        f"answer; p90 {esc(fmt_ms(totals.get('p90_ms')))}, longest "
        f"{esc(fmt_ms(totals.get('max_ms')))}</p>",
        durations_chart(data.get("durations") or []),
        "<h2>Why they happened</h2>",
        causes_chart(causes),
        "<h2>Top churning clients</h2>",
        '<p class="meta">churn = member sessions started + ended, by client.id</p>',
        clients_chart(data.get("clients") or []),
        _table(
            [
                "client",
                "sessions",
                "leaves",
                "expired/fenced",
                "rebalances triggered",
                "hosts",
                "groups",
            ],
            [
                [
                    c["client"],
                    c["sessions"],
                    c["leaves"],
                    c["abnormal"],
                    c["triggered"],
                    c["hosts"],
                    c["groups"],
                ]
                for c in data.get("clients") or []
            ],
            "table-clients",
        ),
        "<h2>Groups with the most rebalances</h2>",
        _table(
            [
                "group",
                "rebalances",
                "time rebalancing",
                "churn",
                "expired/fenced",
                "peak daily members",
                "commits",
            ],
            [
                [
                    _group_name(g, multi),
                    g["rebalances"],
                    fmt_ms(g["rebalancing_ms"]),
                    g["churn"],
                    g["abnormal_leaves"],
                    g["max_daily_members"],
                    g["commits"],
                ]
                for g in groups
            ],
            "table-groups",
        ),
        "<h2>Slowest rebalances</h2>",
        _table(
            [
                "group",
                "generation",
                "cause",
                "triggered by",
                "started",
                "took",
                "restarts",
                "members",
            ],
            [
                [
                    _group_name(r, multi),
                    r["generation_id"],
                    r["cause"],
                    triggered_by(r),
                    fmt_full_time(r["start_ms"]),
                    fmt_ms(r["duration_ms"]),
                    r["restarts"],
                    f"{_or_unknown(r['members_before'])} → {r['members_after']}",
                ]
                for r in slowest
            ],
            "table-slowest",
        ),
        "</body></html>",
    ]
    return "\n".join(parts)
