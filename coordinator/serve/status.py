"""What the status page and `/groups` show: every group, its members, its partitions (committed
offset, end offset, lag) and its recent rebalances, each with who or what triggered it and why.

- `RebalanceHistory` is an event sink: it keeps the last few rebalances of each group (cause,
  trigger, generation, members, durations) and the one in progress, and writes the one log line
  per completed rebalance (group, generation, cause, trigger, members, duration) at INFO. At
  start-up `restore` puts back the last ones from the history log (coordinator.serve.history's
  `recent_rebalances`), so the list survives a restart.
- `StatusProvider` builds plain dicts from the core's snapshots (`core.groups()`), decoding each
  consumer member's ConsumerProtocolAssignment into topic -> partitions. Per partition (committed
  or assigned): the committed offset, the end offset and the lag. End offsets come from
  `end_offsets`: by default what this server's own ListOffsets answers (standalone groupcoord
  stores no records: coordinator.broker.answers); the sidecar sets the lag tracker's last
  measurement, or None (unknown). Unknown shows as "-". Other modules may add per-group fields
  (`add_fields`: the sidecar adds consumer lag).
- `render_html` turns those dicts into one self-contained page: no external resource, no build
  step, inline CSS that stacks on a phone, and one inline script (the group filter box, allowed by
  its hash in the Content-Security-Policy: FILTER_SCRIPT_CSP) that hides the groups whose id does
  not contain the text typed, and keeps that text in the URL (`?q=`) across the page's refresh.
  Everything a client chose (group ids, client ids, hosts, topic names) is escaped; the script
  reads names from attributes and never writes markup. In a sidecar fleet it opens with a "Fleet"
  section drawn from the fleet document (`Server.fleet_status`): this member, the members, and
  one compact row per state partition (status, owner, epoch, load time, groups); member
  addresses are escaped too.

Invariant: the provider reads the core, so it runs on the event loop thread (coordinator.serve.http
serves on the loop). Memory is bounded: HISTORY_PER_GROUP rebalances per group; a deleted group's
history goes with it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.list_offsets.v5.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)

from coordinator.broker import answers as broker_answers
from coordinator.core.events import (
    NO_TRIGGER,
    Event,
    GroupDeleted,
    RebalanceCause,
    RebalanceCompleted,
    RebalanceStarted,
    RebalanceTrigger,
)
from coordinator.core.group import CONSUMER_PROTOCOL_TYPE, GroupSnapshot
from coordinator.serve import share_status
from protocol import consumer as consumer_protocol
from storage.history import FieldValue, HistoryEvent

if TYPE_CHECKING:
    from coordinator.serve.server import Server

log = logging.getLogger("groupcoord.rebalance")

HISTORY_PER_GROUP = 10

FieldSource = Callable[[str], dict[str, str]]
"""group_id -> extra fields shown with the group (e.g. the sidecar's consumer lag)."""

TopicPartition = tuple[str, int]
EndOffsets = Callable[[Iterable[TopicPartition]], Mapping[TopicPartition, int]]
"""The end offsets of the partitions asked for that are known (the others are left out)."""


def trigger_dict(trigger: RebalanceTrigger) -> dict[str, Any] | None:
    """The trigger as /groups shows it; None when there is nothing to name."""
    if trigger == NO_TRIGGER:
        return None
    return {
        "member_id": trigger.member_id,
        "group_instance_id": trigger.group_instance_id,
        "client_id": trigger.client_id,
        "client_host": trigger.client_host,
        "topics": list(trigger.topics),
    }


def trigger_text(trigger: RebalanceTrigger) -> str:
    """One line: the member's client id, host and instance id, or the topics; "-" if nothing."""
    if trigger.member_id is not None:
        who = trigger.client_id or trigger.member_id
        if trigger.client_host:
            who += f" @ {trigger.client_host}"
        if trigger.group_instance_id:
            who += f" (instance {trigger.group_instance_id})"
        return who
    if trigger.topics:
        return "topic " + ", ".join(trigger.topics)
    return "-"


@dataclass(frozen=True, slots=True)
class RebalanceRecord:
    generation_id: int
    cause: str
    members: int
    protocol_name: str | None
    duration_ms: int
    join_ms: int
    sync_ms: int
    completed_at: float  # wall clock, seconds
    trigger: RebalanceTrigger = NO_TRIGGER

    def as_dict(self) -> dict[str, Any]:
        return {
            "generation_id": self.generation_id,
            "cause": self.cause,
            "trigger": trigger_dict(self.trigger),
            "members": self.members,
            "protocol": self.protocol_name,
            "duration_ms": self.duration_ms,
            "join_ms": self.join_ms,
            "sync_ms": self.sync_ms,
            "completed_at": _iso(self.completed_at),
        }


def _text(value: FieldValue) -> str | None:
    return value if isinstance(value, str) else None


def _number(value: FieldValue) -> int:
    return value if isinstance(value, int) else 0


def record_from_history(event: HistoryEvent) -> RebalanceRecord:
    """A REBALANCE_COMPLETED entry of the history log (storage.history) as the page keeps it. An
    entry written before triggers were recorded has none (shown as "-")."""
    f = event.get
    topics = f("topics")
    trigger = RebalanceTrigger(
        _text(f("member_id")),
        _text(f("group_instance_id")),
        _text(f("client_id")) or "",
        _text(f("client_host")) or "",
        topics if isinstance(topics, tuple) else (),
    )
    join_ms, rebalance_ms = _number(f("join_ms")), _number(f("rebalance_ms"))
    return RebalanceRecord(
        _number(f("generation_id")),
        _text(f("cause")) or "",
        _number(f("members")),
        _text(f("protocol_name")),
        rebalance_ms,
        join_ms,
        rebalance_ms - join_ms,
        event.timestamp_ms / 1000,
        trigger,
    )


def _iso(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall))


class RebalanceHistory:
    """Event sink: the recent rebalances of every group, and the rebalance log line."""

    def __init__(self, wall_s: Callable[[], float], per_group: int = HISTORY_PER_GROUP) -> None:
        self._wall_s = wall_s  # wall clock, for "completed at" (the events carry monotonic ms)
        self._per_group = self.per_group = per_group
        # Oldest first. Tuples, not deques: a deque costs ~600 bytes even holding one record.
        self.completed: dict[str, tuple[RebalanceRecord, ...]] = {}
        # cause, trigger, wall start
        self.in_progress: dict[str, tuple[RebalanceCause, RebalanceTrigger, float]] = {}

    def __call__(self, event: Event) -> None:
        if type(event) is RebalanceCompleted:
            self._completed(event)
        elif type(event) is RebalanceStarted:
            self.in_progress[event.group_id] = (event.cause, event.trigger, self._wall_s())
        elif type(event) is GroupDeleted:
            self.completed.pop(event.group_id, None)
            self.in_progress.pop(event.group_id, None)

    def restore(self, recent: Mapping[str, Iterable[RebalanceRecord]]) -> int:
        """Put back rebalances from before a restart (oldest first per group), before the ones
        seen since; the last `per_group` are kept. -> how many were put back."""
        keep = max(self.per_group, 1)
        restored = 0
        for group_id, records in recent.items():
            older = tuple(records)
            merged = (*older, *self.completed.get(group_id, ()))[-keep:]
            restored += max(0, len(merged) - len(self.completed.get(group_id, ())))
            if merged:
                self.completed[group_id] = merged
        return restored

    def _completed(self, e: RebalanceCompleted) -> None:
        self.in_progress.pop(e.group_id, None)
        record = RebalanceRecord(
            e.generation_id,
            e.cause.value,
            e.members,
            e.protocol_name,
            e.now_ms - e.started_ms,
            e.join_completed_ms - e.started_ms,
            e.now_ms - e.join_completed_ms,
            self._wall_s(),
            e.trigger,
        )
        kept = self.completed.get(e.group_id, ())
        keep = self._per_group - 1
        # max(0, ...): with fewer than `keep` kept, a negative start would drop some of them.
        kept = kept[max(0, len(kept) - keep) :] if keep > 0 else ()
        self.completed[e.group_id] = (*kept, record)
        # The fields go as `extra`: the plain formatter (serve.lifecycle) appends them as
        # key=value, the JSON one as keys of the object.
        log.info(
            "rebalance completed",
            extra={
                "group_id": e.group_id,
                "generation_id": e.generation_id,
                "cause": e.cause.value,
                "trigger": trigger_text(e.trigger),
                "members": e.members,
                "duration_ms": record.duration_ms,
                "join_ms": record.join_ms,
                "sync_ms": record.sync_ms,
                # "consumer" for KIP-848 (its generation is the group epoch, join_ms runs to the
                # last target assignment): without it the line reads as a classic rebalance.
                "group_type": e.group_type,
            },
        )


def install_history(server: Server, wall_s: Callable[[], float]) -> RebalanceHistory:
    history = RebalanceHistory(wall_s)
    server.event_sinks.append(history)
    return history


# -- the provider ---------------------------------------------------------------------------------


class StatusProvider:
    """Plain-dict views of the groups for the page and /groups (loop thread only)."""

    def __init__(self, server: Server, history: RebalanceHistory) -> None:
        self.server = server
        self.history = history
        self._fields: list[FieldSource] = []
        # Standalone: this server's own ListOffsets answer. The sidecar replaces it with its lag
        # tracker's measurement, or None when it measures nothing (end offsets unknown).
        self.end_offsets: EndOffsets | None = self.own_end_offsets

    def own_end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The latest offsets this server's ListOffsets answers (coordinator.broker.answers: the
        catalog's partitions are empty), through the same function that answers clients."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        if not by_topic:
            return {}
        request = ListOffsetsRequest(
            replica_id=-1,  # type: ignore[arg-type]
            isolation_level=0,  # type: ignore[arg-type]
            topics=tuple(
                ListOffsetsTopic(
                    name=topic,  # type: ignore[arg-type]
                    partitions=tuple(
                        ListOffsetsPartition(partition_index=p, timestamp=-1)  # type: ignore[arg-type]
                        for p in sorted(set(parts))
                    ),
                )
                for topic, parts in sorted(by_topic.items())
            ),
        )
        response = broker_answers.list_offsets_response(5, request, self.server.catalog)
        return {
            (str(t.name), int(p.partition_index)): int(p.offset)
            for t in response.topics
            for p in t.partitions
            if p.error_code == 0 and p.offset >= 0
        }

    def add_fields(self, source: FieldSource) -> None:
        """Extra per-group fields (name -> text), shown on the page and in /groups `extra`."""
        self._fields.append(source)

    def groups(self) -> list[dict[str, Any]]:
        classic = [self._group(g) for g in self.server.core.groups()]
        consumer = self.server.core.consumer
        kip848 = [self._consumer_group(gid) for gid in list(consumer.groups)]
        kip848 += [self._share_group(gid) for gid in list(self.server.core.share.groups)]
        return sorted((g for g in (*classic, *kip848) if g is not None),
                      key=lambda g: g["group_id"])  # fmt: skip

    def group(self, group_id: str) -> dict[str, Any] | None:
        snapshot = self.server.core.group(group_id)
        if snapshot is None:
            return self._consumer_group(group_id) or self._share_group(group_id)
        return self._group(snapshot)

    def _share_group(self, group_id: str) -> dict[str, Any] | None:  # KIP-932
        return share_status.share_group(self.server.core, group_id, self.end_offsets)

    def _consumer_group(self, group_id: str) -> dict[str, Any] | None:
        """A KIP-848 consumer group (issue 23), in the classic groups' shape: the group epoch
        stands for the generation, the server assignor for the protocol; each member shows its
        member epoch and state."""
        core = self.server.core
        d = core.consumer.describe(group_id)
        if d is None:
            return None
        session_ms = core.config.consumer_session_timeout_ms
        names = core.topics.name_of

        def by_topic(tps: Iterable[Any]) -> dict[str, list[int]]:
            return {names(tp.topic_id) or str(tp.topic_id): list(tp.partitions) for tp in tps}

        members = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": session_ms,
                "leader": False,
                "member_epoch": m.member_epoch,
                "member_state": m.member_state.name.lower(),
                "assignment": by_topic(m.assignment),
                "target_assignment": by_topic(m.target_assignment),
            }
            for m in d.members
        ]
        return {
            "group_id": group_id,
            "type": "consumer",
            "state": d.state.value,
            "protocol_type": "consumer",
            "protocol": d.assignor_name,
            "generation_id": d.group_epoch,
            "group_epoch": d.group_epoch,
            "assignment_epoch": d.assignment_epoch,
            "leader": None,
            "members": members,
            "pending_members": 0,
            "rebalancing": None,
            "offsets": self._offsets(group_id, members),
            "rebalances": [],
            "extra": {},
        }

    def _group(self, g: GroupSnapshot) -> dict[str, Any]:
        consumer = g.protocol_type == CONSUMER_PROTOCOL_TYPE
        members = []
        for m in g.members:
            member: dict[str, Any] = {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "leader": m.member_id == g.leader_id,
            }
            if consumer:
                member["assignment"] = consumer_protocol.assignment_partitions(m.assignment)
            else:
                member["assignment_bytes"] = len(m.assignment)
            members.append(member)
        extra: dict[str, str] = {}
        for source in self._fields:
            try:
                extra.update(source(g.group_id))
            except Exception as exc:  # one broken source must not take the page down
                extra[getattr(source, "__name__", "extra")] = f"error: {exc}"
        in_progress = self.history.in_progress.get(g.group_id)
        rebalancing = None
        if in_progress is not None:
            cause, trigger, since = in_progress
            rebalancing = {
                "cause": cause.value,
                "trigger": trigger_dict(trigger),
                "since": _iso(since),
            }
        return {
            "group_id": g.group_id,
            "state": g.state,
            "protocol_type": g.protocol_type,
            "protocol": g.protocol_name,
            "generation_id": g.generation_id,
            "leader": g.leader_id,
            "members": members,
            "pending_members": g.pending_members,
            "rebalancing": rebalancing,
            "offsets": self._offsets(g.group_id, members),
            "rebalances": [
                r.as_dict() for r in reversed(self.history.completed.get(g.group_id, ()))
            ],
            "extra": extra,
        }

    def _offsets(self, group_id: str, members: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One row per partition the group committed or is assigned, by topic and partition:
        the committed offset, the end offset, the lag (None where unknown) and the owner."""
        owners: dict[TopicPartition, str] = {}
        for m in members:
            for topic, parts in (m.get("assignment") or {}).items():
                for p in parts:
                    owners[topic, p] = m["member_id"]
        committed = {tp: v.offset for tp, v in self.server.core.committed_offsets(group_id).items()}
        partitions = sorted(owners.keys() | committed.keys())
        ends: Mapping[TopicPartition, int] = {}
        if self.end_offsets is not None and partitions:
            try:
                ends = self.end_offsets(partitions)
            except Exception:  # a broken source must not take the page down: ends unknown
                log.exception("end offsets for the status page failed")
        rows = []
        for tp in partitions:
            offset = committed.get(tp)
            end = ends.get(tp)
            known = offset is not None and offset >= 0 and end is not None
            rows.append(
                {
                    "topic": tp[0],
                    "partition": tp[1],
                    "committed_offset": offset,
                    "end_offset": end,
                    "lag": max(0, end - offset) if known else None,  # type: ignore[operator]
                    "member_id": owners.get(tp),
                }
            )
        return rows

    def summary(self) -> dict[str, Any]:
        server = self.server
        ready, why = readiness(server)
        upstream = getattr(server, "upstream_status", None)  # sidecar mode (/upstream)
        return {
            "ready": ready,
            "why": why,
            "connections": len(server.connections),
            "advertised": f"{server.advertised.host}:{server.advertised.port}",
            "upstream": None if upstream is None else upstream(),
        }


def readiness(server: Server) -> tuple[bool, str]:
    """Ready = the Kafka listener accepts and the log is loaded (docs/protocol.md §12.3: until then
    group APIs answer COORDINATOR_LOAD_IN_PROGRESS)."""
    if server.runtime is None:
        return False, "not started"
    if getattr(server, "listening", True) is False:
        return False, "not listening"
    if server.core.loading:
        return False, "loading the log"
    check = getattr(server, "ready_check", None)  # a sidecar fleet's (coordinator.sidecar.fleet)
    if check is not None:
        return check()  # type: ignore[no-any-return]
    return True, "ready"


# -- the page ------------------------------------------------------------------------------------

_CSS = """
*{box-sizing:border-box}
body{font:15px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;padding:12px;
color:#1b1f23;background:#f6f8fa}
h1{font-size:20px;margin:0 0 4px}
.meta{color:#57606a;font-size:13px;margin-bottom:12px}
.group{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:12px;margin:0 0 12px}
.group h2{font-size:17px;margin:0 0 6px;word-break:break-all}
.facts{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:14px;color:#57606a;margin-bottom:8px}
.facts b{color:#1b1f23;font-weight:600}
.state{display:inline-block;border-radius:10px;padding:0 8px;font-size:13px;color:#fff;
background:#6e7781}
.state.Stable,.state.serving{background:#1a7f37}.state.PreparingRebalance,
.state.CompletingRebalance,.state.loading{background:#bf8700}.state.Empty{background:#6e7781}
.state.Dead,.state.fenced{background:#cf222e}
.parts{max-height:20em;overflow-y:auto}
table.parts th,table.parts td{padding:1px 6px;font-size:13px}
table.parts .state{font-size:12px}
table{border-collapse:collapse;width:100%;font-size:14px}
th,td{text-align:left;padding:4px 6px;border-top:1px solid #eaeef2;vertical-align:top}
th{color:#57606a;font-weight:600}
td.id{word-break:break-all;font-family:ui-monospace,monospace;font-size:12px}
h3{font-size:14px;margin:10px 0 4px;color:#57606a}
.scroll{overflow-x:auto}
[hidden]{display:none!important}
.filter{display:flex;gap:8px;align-items:center;margin:0 0 12px;font-size:14px;color:#57606a}
.filter input{font:inherit;padding:4px 8px;border:1px solid #d0d7de;border-radius:6px;
width:min(24em,100%)}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
@media (max-width:640px){
 table.members thead{display:none}
 table.members tr{display:block;border-top:1px solid #eaeef2;padding:4px 0}
 table.members td{display:block;border:0;padding:2px 0}
 table.members td::before{content:attr(data-label) ": ";color:#57606a;font-weight:600}
}
"""


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _partitions(assignment: dict[str, list[int]] | None) -> str:
    if assignment is None:
        return "(undecodable)"
    if not assignment:
        return "none"
    return "; ".join(f"{t}: {', '.join(map(str, ps))}" for t, ps in sorted(assignment.items()))


def _member_rows(group: dict[str, Any]) -> str:
    rows = []
    for m in group["members"]:
        if "assignment" in m:
            assigned = _partitions(m["assignment"])
        else:
            assigned = f"{m['assignment_bytes']} bytes ({group['protocol_type'] or 'no type'})"
        client = _e(m["client_id"]) + (" (leader)" if m["leader"] else "")
        rows.append(
            "<tr>"
            f'<td data-label="client id">{client}</td>'
            f'<td data-label="host">{_e(m["client_host"])}</td>'
            f'<td data-label="partitions">{_e(assigned)}</td>'
            f'<td data-label="instance id">{_e(m["group_instance_id"] or "-")}</td>'
            f'<td data-label="member id" class="id">{_e(m["member_id"])}</td>'
            "</tr>"
        )
    return "".join(rows)


def _trigger_label(trigger: dict[str, Any] | None) -> tuple[str, str]:
    """(text, title) of a trigger as /groups shows it: the text names the client, the title adds
    the member id."""
    if trigger is None:
        return "-", ""
    text = trigger_text(
        RebalanceTrigger(
            trigger["member_id"],
            trigger["group_instance_id"],
            trigger["client_id"],
            trigger["client_host"],
            tuple(trigger["topics"]),
        )
    )
    return text, "" if trigger["member_id"] is None else f"member {trigger['member_id']}"


def _trigger_cell(trigger: dict[str, Any] | None) -> str:
    text, title = _trigger_label(trigger)
    attr = f' title="{_e(title)}"' if title else ""
    return f'<td class="trigger"{attr}>{_e(text)}</td>'


def _rebalance_rows(group: dict[str, Any]) -> str:
    return "".join(
        "<tr>"
        f"<td>{_e(r['generation_id'])}</td><td>{_e(r['cause'])}</td>"
        f"{_trigger_cell(r['trigger'])}"
        f"<td>{_e(r['duration_ms'])} ms</td><td>{_e(r['members'])}</td>"
        f'<td title="{_e(r["completed_at"])}">{_e(r["completed_at"][11:19])}</td>'
        "</tr>"
        for r in group["rebalances"]
    )


def _dash(value: object) -> str:
    return "-" if value is None else _e(value)


def _offset_rows(group: dict[str, Any]) -> str:
    clients = {m["member_id"]: m["client_id"] for m in group["members"]}
    rows = []
    for o in group["offsets"]:
        owner = o["member_id"]
        who = "-" if owner is None else _e(clients.get(owner) or owner)
        title = "" if owner is None else f' title="{_e(owner)}"'
        rows.append(
            f"<tr><td>{_e(o['topic'])}</td><td class=num>{_e(o['partition'])}</td>"
            f"<td{title}>{who}</td><td class=num>{_dash(o['committed_offset'])}</td>"
            f"<td class=num>{_dash(o['end_offset'])}</td><td class=num>{_dash(o['lag'])}</td>"
            "</tr>"
        )
    return "".join(rows)


def _group_html(group: dict[str, Any]) -> str:
    gid = _e(group["group_id"])
    parts = [f'<section class="group" id="group-{gid}" data-group="{gid}">']
    parts.append(
        f'<h2>{gid} <span class="state {_e(group["state"])}">{_e(group["state"])}</span></h2>'
    )
    facts = [
        ("protocol", f"{group['protocol_type'] or '-'} / {group['protocol'] or '-'}"),
        ("generation", group["generation_id"]),
        ("members", len(group["members"])),
    ]
    if group["pending_members"]:
        facts.append(("pending", group["pending_members"]))
    if group["rebalancing"]:
        r = group["rebalancing"]
        who, _ = _trigger_label(r["trigger"])
        facts.append(("rebalancing", f"{r['cause']} ({who}) since {r['since']}"))
    facts.extend(group["extra"].items())
    parts.append(
        '<div class="facts">'
        + "".join(f"<span>{_e(k)} <b>{_e(v)}</b></span>" for k, v in facts)
        + "</div>"
    )
    if group["members"]:
        parts.append(
            '<table class="members"><thead><tr><th>client id</th><th>host</th>'
            "<th>partitions</th><th>instance id</th><th>member id</th></tr></thead>"
            f"<tbody>{_member_rows(group)}</tbody></table>"
        )
    if group["offsets"]:
        parts.append(
            "<h3>Partitions</h3><div class=scroll><table class=offsets><thead><tr>"
            "<th>topic</th><th class=num>partition</th><th>member</th>"
            "<th class=num>committed</th><th class=num>end offset</th><th class=num>lag</th>"
            f"</tr></thead><tbody>{_offset_rows(group)}</tbody></table></div>"
        )
    if group["rebalances"]:
        parts.append(
            "<h3>Last rebalances</h3><div class=scroll><table class=rebalances><thead><tr>"
            "<th>gen</th><th>cause</th><th>triggered by</th><th>duration</th><th>members</th>"
            "<th>at (UTC)</th>"
            f"</tr></thead><tbody>{_rebalance_rows(group)}</tbody></table></div>"
        )
    parts.append("</section>")
    return "".join(parts)


# -- the fleet section (sidecar fleet: coordinator.sidecar.fleet.Fleet.status) -------------------

FLEET_STATUSES = ("serving", "loading", "remote", "fenced", "unassigned")
"""A state partition's statuses, in the order the page and `groupcoord groups fleet` count them."""


def fleet_counts(fleet: dict[str, Any]) -> dict[str, int]:
    """Partitions by status, every known status present (0 if none)."""
    counts = dict.fromkeys(FLEET_STATUSES, 0)
    for part in fleet["partitions"]:
        counts[part["status"]] = counts.get(part["status"], 0) + 1
    return counts


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _partition_rows(fleet: dict[str, Any]) -> str:
    rows = []
    me = fleet["address"]
    for p in fleet["partitions"]:
        status = p["status"]
        serving = status == "serving"  # load time and groups are known for our own only
        owner = p["owner"] or "-"
        if p["owner"] and p["owner"] == me:
            owner += " (this)"
        load = "<td>-</td>"
        if serving:
            at = "" if p["loaded_at"] is None else f' title="loaded at {_e(_iso(p["loaded_at"]))}"'
            load = f"<td{at}>{_e(_seconds(p['load_seconds']))}</td>"
        rows.append(
            f"<tr><td>{_e(p['partition'])}</td>"
            f'<td><span class="state {_e(status)}">{_e(status)}</span></td>'
            f"<td>{_e(owner)}</td><td>{_e('-' if p['epoch'] is None else p['epoch'])}</td>"
            f"{load}<td>{_e(p['groups'] if serving else '-')}</td></tr>"
        )
    return "".join(rows)


def _fleet_html(fleet: dict[str, Any]) -> str:
    chip = '<span class="state serving">ready</span>'
    if not fleet["ready"]:
        chip = '<span class="state loading">not ready</span>'
    counts = fleet_counts(fleet)
    facts: list[tuple[str, object]] = [
        ("this member", fleet["address"] or "-"),
        ("fleet group", fleet["fleet_group"]),
        ("generation", fleet["generation"]),
        ("state topic", fleet["state_topic"]),
        ("fleet rebalances", fleet["rebalances"]),
        ("partitions", " · ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"),
    ]
    if fleet["error"]:
        facts.append(("error", fleet["error"]))
    owned: dict[str, int] = {}
    for p in fleet["partitions"]:
        if p["owner"]:
            owned[p["owner"]] = owned.get(p["owner"], 0) + 1
    members = "".join(
        f"<span><b>{_e(m)}</b>{' (this)' if m == fleet['address'] else ''} "
        f"{owned.get(m, 0)} partitions</span>"
        for m in fleet["members"]
    )
    return (
        '<section class="group fleet" id="fleet">'
        f"<h2>Fleet {chip}</h2><div class=facts>"
        + "".join(f"<span>{_e(k)} <b>{_e(v)}</b></span>" for k, v in facts)
        + f"</div><h3>Members ({len(fleet['members'])})</h3>"
        f"<div class=facts>{members or '<span>none yet</span>'}</div>"
        '<h3>State partitions</h3><div class="scroll parts"><table class=parts><thead><tr>'
        "<th>partition</th><th>status</th><th>owner</th><th>epoch</th><th>load</th>"
        f"<th>groups</th></tr></thead><tbody>{_partition_rows(fleet)}</tbody></table></div>"
        "</section>"
    )


# The group filter: hides the sections whose group id does not contain the text (case-insensitive)
# and keeps the text in the URL, so the page's own refresh keeps filtering. It reads names from
# attributes and writes only `hidden` and textContent: no markup from anything a client chose.
FILTER_SCRIPT = (
    "(function(){var q=document.getElementById('filter');if(!q)return;"
    "var n=document.getElementById('filter-count');"
    "function apply(){var v=q.value.toLowerCase(),shown=0,all=0;"
    "document.querySelectorAll('section[data-group]').forEach(function(s){all++;"
    "var hit=s.getAttribute('data-group').toLowerCase().indexOf(v)>=0;s.hidden=!hit;"
    "if(hit)shown++;});"
    "n.textContent=v?shown+' of '+all+' groups':'';"
    "var u=new URL(location.href);if(q.value)u.searchParams.set('q',q.value);"
    "else u.searchParams.delete('q');history.replaceState(null,'',u.href);}"
    "q.addEventListener('input',apply);if(q.value){apply();q.focus();}})();"
)
FILTER_SCRIPT_CSP = (
    "'sha256-" + base64.b64encode(hashlib.sha256(FILTER_SCRIPT.encode()).digest()).decode() + "'"
)
"""The script's hash, for the page's Content-Security-Policy `script-src` (coordinator.serve.http):
the one script the browser runs; an injected one would not match it."""


def _filter_html(query: str) -> str:
    return (
        "<div class=filter><label for=filter>Filter groups</label>"
        f'<input id=filter type=search autocomplete=off spellcheck=false value="{_e(query)}" '
        'placeholder="part of a group id"><span id=filter-count></span></div>'
    )


def render_html(
    summary: dict[str, Any],
    groups: list[dict[str, Any]],
    now_s: float,
    *,
    fleet: dict[str, Any] | None = None,
    query: str = "",
) -> str:
    """The status page; `fleet` is the fleet document when this server is a fleet member;
    `query` the filter box's text (from `?q=`)."""
    body = "".join(_group_html(g) for g in groups) or "<p>No groups.</p>"
    if groups:  # the filter box, and the script that makes it filter
        body = _filter_html(query) + body + f"<script>{FILTER_SCRIPT}</script>"
    if fleet is not None:
        body = _fleet_html(fleet) + body
    ready = "ready" if summary["ready"] else f"not ready: {summary.get('why') or 'loading'}"
    links = "<a href=/groups>JSON</a> · <a href=/metrics>metrics</a>"
    if fleet is not None:
        links += " · <a href=/fleet>fleet</a>"
    upstream = summary.get("upstream")
    if upstream is not None:
        links += " · <a href=/upstream>upstream</a>"
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        '<meta http-equiv=refresh content="5">'
        f"<title>groupcoord: {len(groups)} groups</title><style>{_CSS}</style></head><body>"
        f"<h1>groupcoord</h1><div class=meta>{_e(summary['advertised'])} · {ready} · "
        f"{len(groups)} groups · {_e(summary['connections'])} connections · "
        f"{_e(_iso(now_s))} · {links}</div>"
        f"{'' if upstream is None else _upstream_html(upstream)}"
        f"{body}</body></html>"
    )


def _upstream_html(upstream: dict[str, Any]) -> str:
    """Sidecar mode: the upstream cluster as the sidecar sees it (Sidecar.upstream_status)."""
    state = upstream["state"]
    if upstream.get("error") and state != "reachable":
        state += f" ({upstream['error']})"
    absent = upstream.get("topics_absent") or []
    parts = [
        f"upstream {upstream['bootstrap']}: {state}",
        f"{upstream['brokers']} brokers",
        f"{upstream['topics']} topics",
    ]
    if absent:
        parts.append("absent, not yet deleted: " + ", ".join(absent))
    return f"<div class=meta id=upstream>{_e(' · '.join(parts))}</div>"
