"""What `groupcoord groups` prints: kafka-consumer-groups.sh's tables (its column names, `-` for a
missing value) and the same facts as JSON. Pure: no I/O.

The describe views, as Kafka's ConsumerGroupCommand:
- offsets (the default): GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST
  CLIENT-ID, one row per partition that is assigned or has a committed offset. LAG is
  LOG-END-OFFSET - CURRENT-OFFSET, `-` without a committed offset or a known log end.
- members: GROUP CONSUMER-ID [GROUP-INSTANCE-ID, when a member has one] HOST CLIENT-ID
  #PARTITIONS, and with --verbose Kafka 4's CURRENT-EPOCH CURRENT-ASSIGNMENT TARGET-EPOCH
  TARGET-ASSIGNMENT (an assignment as `t1:0,1,2;t2:0`; the epochs and the target are a KIP-848
  group's, `-` for a classic group's members, whose CURRENT-ASSIGNMENT is their assignment).
- state: GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS, and with --verbose
  GROUP-EPOCH TARGET-ASSIGNMENT-EPOCH before #MEMBERS (`-` for a classic group).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from coordinator.tools.groups_reset import PlanRow
from coordinator.tools.groups_wire import GroupView

TP = tuple[str, int]
MISSING = "-"


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    )


def _cell(value: int | str | None) -> str:
    return MISSING if value is None or value == "" else str(value)


@dataclass(frozen=True, slots=True)
class OffsetRow:
    group_id: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


def offset_rows(view: GroupView, log_end: dict[TP, int]) -> list[OffsetRow]:
    owner = view.assigned()
    committed = {(t, p): o for t, ps in (view.offsets or {}).items() for p, o in ps.items()}
    rows = []
    for t, p in sorted(set(owner) | set(committed)):
        current, end, member = committed.get((t, p)), log_end.get((t, p)), owner.get((t, p))
        lag = None if current is None or end is None else end - current
        rows.append(OffsetRow(
            view.group_id, t, p, current, end, lag,
            member.member_id if member else None, member.host if member else None,
            member.client_id if member else None,
        ))  # fmt: skip
    return rows


def render_offsets(rows: list[OffsetRow]) -> str:
    return table(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
         "HOST", "CLIENT-ID"],
        [[r.group_id, r.topic, str(r.partition), _cell(r.current_offset), _cell(r.log_end_offset),
          _cell(r.lag), _cell(r.consumer_id), _cell(r.host), _cell(r.client_id)] for r in rows],
    )  # fmt: skip


def assignment_text(assignment: dict[str, list[int]] | None) -> str:
    """Kafka 4's getAssignmentString: `t1:0,1,2;t2:0`, `-` for none."""
    if not assignment or not any(assignment.values()):
        return MISSING
    return ";".join(
        f"{t}:{','.join(map(str, sorted(ps)))}" for t, ps in sorted(assignment.items()) if ps
    )


def render_members(view: GroupView, verbose: bool) -> str:
    instance = any(m.group_instance_id for m in view.members)
    header = ["GROUP", "CONSUMER-ID", *(["GROUP-INSTANCE-ID"] if instance else []), "HOST",
              "CLIENT-ID", "#PARTITIONS",
              *(["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"]
                if verbose else [])]  # fmt: skip
    rows = [
        [view.group_id, m.member_id, *([_cell(m.group_instance_id)] if instance else []),
         m.host, m.client_id, str(sum(len(ps) for ps in m.assignment.values())),
         *([_cell(m.member_epoch), assignment_text(m.assignment),
            _cell(view.assignment_epoch if m.member_epoch is not None else None),
            assignment_text(m.target_assignment)] if verbose else [])]
        for m in sorted(view.members, key=lambda m: m.member_id)
    ]  # fmt: skip
    return table(header, rows)


def render_state(view: GroupView, verbose: bool = False) -> str:
    epochs = ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"] if verbose else []
    return table(
        ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", *epochs, "#MEMBERS"],
        [[view.group_id, view.coordinator.label(), _cell(view.protocol), view.state,
          *([_cell(view.group_epoch), _cell(view.assignment_epoch)] if verbose else []),
          str(len(view.members))]],
    )  # fmt: skip


def view_json(view: GroupView, rows: list[OffsetRow] | None) -> dict[str, Any]:
    """One group: state, coordinator, members with assignments, and (when the offsets view was
    asked) one entry per partition with the offsets table's columns."""
    document: dict[str, Any] = {
        "group_id": view.group_id,
        "coordinator": {"node_id": view.coordinator.node_id, "host": view.coordinator.host,
                        "port": view.coordinator.port},
        "state": view.state,
        "type": view.group_type,
        "protocol_type": view.protocol_type,
        "protocol": view.protocol,
        "group_epoch": view.group_epoch,
        "assignment_epoch": view.assignment_epoch,
        "members": [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "client_id": m.client_id, "host": m.host,
             "assignment": {t: sorted(ps) for t, ps in sorted(m.assignment.items())},
             "member_epoch": m.member_epoch,
             "target_assignment": None if m.target_assignment is None else
             {t: sorted(ps) for t, ps in sorted(m.target_assignment.items())}}
            for m in sorted(view.members, key=lambda m: m.member_id)
        ],
    }  # fmt: skip
    if rows is not None:
        document["offsets"] = [
            {k: v for k, v in asdict(r).items() if k != "group_id"} for r in rows
        ]
    return document


def render_plan(rows: list[PlanRow]) -> str:
    """The reset plan: Kafka's GROUP TOPIC PARTITION NEW-OFFSET, with the offset it replaces."""
    return table(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
        [[r.group_id, r.topic, str(r.partition), _cell(r.current_offset), str(r.new_offset)]
         for r in rows],
    )  # fmt: skip


def plan_json(rows: list[PlanRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
