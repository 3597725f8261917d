"""`groupcoord groups reset-offsets`: what each partition's committed offset becomes, computed as
Kafka's GroupOffsetsResetter does (kafka-consumer-groups.sh --reset-offsets).

Rules (Kafka's):
- Scope: `--topic T` (every partition of T in Metadata), `--topic T:0,2` (those partitions), or
  `--all-topics` (every partition the group has a committed offset for). A partition Metadata does
  not know is an error ("The partitions ... do not exist"), before anything is asked or written.
- --to-earliest / --to-latest: the log's start / end offset (ListOffsets -2 / -1). A
  --to-latest that moves a committed offset backward (the committed offset is past the log end:
  a truncated or recreated log, or a broker whose ListOffsets is wrong) is planned with a
  warning naming the partition: never silently.
- --to-current: the committed offset; the log end offset where there is none (Kafka's
  resetToCurrent).
- --from-file: Kafka's CSV, `topic,partition,offset` (one group) or
  `group,topic,partition,offset` (`parse_offsets_csv`), as --export prints it; taken as is.
- --to-offset N and --shift-by N (committed + N; a partition without a committed offset is an
  error) are clamped to [earliest, latest], with a warning naming the partition.
- --to-datetime and --by-duration (now - duration): the first offset whose timestamp is at or
  after the time; where there is none, the latest offset, with a warning.
- Nothing is written here: the caller commits the plan only with --execute, and only to a group
  that is Empty or does not exist (Dead). Time is an argument (`now_ms`), as in the core.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from coordinator.tools.groups_log import TP, ClusterLog
from coordinator.tools.groups_wire import GroupsError

Kind = Literal["earliest", "latest", "current", "offset", "shift", "time"]

_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)
_SIMPLE_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class Scenario:
    kind: Kind
    value: int = 0  # the offset (offset), the shift (shift), or the epoch ms (time)

    def describe(self) -> str:
        return {"earliest": "to-earliest", "latest": "to-latest", "current": "to-current",
                "offset": f"to-offset {self.value}", "shift": f"shift-by {self.value}",
                "time": f"to timestamp {self.value} ms"}[self.kind]  # fmt: skip


@dataclass(frozen=True, slots=True)
class PlanRow:
    group_id: str
    topic: str
    partition: int
    current_offset: int | None  # committed before the reset; None = none
    new_offset: int


def parse_duration_ms(text: str) -> int:
    """ISO-8601 as Kafka takes it (Java's Duration.parse: `PT1H30M`, `P1DT12H`, `PT0.5S`), or
    the short form `1h30m`, `2d`, `45s`, `500ms`."""
    iso = _ISO_DURATION.fullmatch(text.strip())
    if iso and any(iso.groupdict().values()):
        parts = {k: float(v or 0) for k, v in iso.groupdict().items()}
        seconds = parts["d"] * 86_400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
        return round(seconds * 1000)
    simple = text.strip().lower()
    if simple and "".join(m.group(0) for m in _SIMPLE_PART.finditer(simple)) == simple:
        return round(sum(float(n) * _UNIT_MS[u] for n, u in _SIMPLE_PART.findall(simple)))
    raise ValueError(f"expected a duration like PT1H30M, P1DT2H or 90m, got {text!r}")


def parse_datetime_ms(text: str) -> int:
    """Kafka's --to-datetime format, `YYYY-MM-DDTHH:mm:SS.sss` with an optional zone (`Z`,
    `+01:00`); without a zone it is local time, as Kafka reads it."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"expected YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm], got {text!r}") from None
    return round(moment.astimezone().timestamp() * 1000)


def parse_topic_arg(text: str) -> tuple[str, list[int] | None]:
    """`T` (every partition) or `T:0,1,2`, as Kafka's --topic."""
    topic, sep, partitions = text.partition(":")
    if not topic or (sep and not partitions):
        raise ValueError(f"expected TOPIC or TOPIC:P[,P...], got {text!r}")
    if not sep:
        return topic, None
    try:
        numbers = sorted({int(p) for p in partitions.split(",")})
    except ValueError:
        raise ValueError(f"invalid partition in {text!r}") from None
    if any(p < 0 for p in numbers):
        raise ValueError(f"invalid partition in {text!r}")
    return topic, numbers


def scope(
    log: ClusterLog,
    topics: list[tuple[str, list[int] | None]] | None,
    committed: dict[str, dict[int, int]],
) -> list[TP]:
    """The partitions to reset: `topics` (None = --all-topics: the committed ones), checked
    against Metadata as Kafka's checkAllTopicPartitionsValid."""
    if topics is None:
        return sorted((t, p) for t, ps in committed.items() for p in ps)
    wanted: set[TP] = set()
    for topic, asked in topics:
        partitions = log.partitions(topic) if asked is None else set(asked)
        if partitions is None:
            raise GroupsError(f'The topic "{topic}" does not exist')
        wanted.update((topic, p) for p in partitions)
    missing = sorted(wanted - set(log.known(sorted(wanted))))
    if missing:
        names = ",".join(f"{t}-{p}" for t, p in missing)
        raise GroupsError(f'The partitions "{names}" do not exist')
    return sorted(wanted)


async def plan(
    log: ClusterLog,
    group_id: str,
    partitions: list[TP],
    committed: dict[str, dict[int, int]],
    scenario: Scenario,
    warn: list[str],
) -> list[PlanRow]:
    """The new offset of each partition (module docstring); warnings are appended to `warn`."""
    current = {(t, p): o for t, ps in committed.items() for p, o in ps.items()}
    new: dict[TP, int]
    match scenario.kind:
        case "earliest":
            new = await log.earliest(partitions)
        case "latest":
            new = await log.latest(partitions)
            warn.extend(
                f"The committed offset {current[tp]} of {tp[0]}-{tp[1]} is past its log end "
                f"offset {new[tp]}: --to-latest moves it BACKWARD to {new[tp]} (a truncated or "
                "recreated log, or a broker whose ListOffsets answer is wrong)."
                for tp in partitions
                if tp in current and new[tp] < current[tp]
            )
        case "current":
            latest = await log.latest([tp for tp in partitions if tp not in current])
            new = {tp: current.get(tp, latest.get(tp, 0)) for tp in partitions}
        case "offset" | "shift":
            requested: dict[TP, int] = {}
            for tp in partitions:
                if scenario.kind == "offset":
                    requested[tp] = scenario.value
                elif tp in current:
                    requested[tp] = current[tp] + scenario.value
                else:
                    raise GroupsError(
                        f"Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no "
                        "current committed offset"
                    )
            new = await _clamped(log, requested, warn)
        case "time":
            found = await log.at_time(partitions, scenario.value)
            empty = [tp for tp in partitions if found.get(tp) is None]
            latest = await log.latest(empty)
            for t, p in empty:
                warn.append(f"Partition {p} from topic {t} is empty. Falling back to latest "
                            "known offset.")  # fmt: skip
            new = {}
            for tp in partitions:
                at = found.get(tp)
                new[tp] = latest[tp] if at is None else at
    return [PlanRow(group_id, t, p, current.get((t, p)), new[t, p]) for t, p in partitions]


async def _clamped(log: ClusterLog, requested: dict[TP, int], warn: list[str]) -> dict[TP, int]:
    """Kafka's checkOffsetsRange: above the log end -> the end; below its start -> the start."""
    partitions = sorted(requested)
    earliest = await log.earliest(partitions)
    latest = await log.latest(partitions)
    out: dict[TP, int] = {}
    for tp, offset in requested.items():
        name = f"{tp[0]}-{tp[1]}"
        if offset > latest[tp]:
            warn.append(f"New offset ({offset}) is higher than latest offset for topic partition "
                        f"{name}. Value will be set to {latest[tp]}.")  # fmt: skip
            out[tp] = latest[tp]
        elif offset < earliest[tp]:
            warn.append(f"New offset ({offset}) is lower than earliest offset for topic partition "
                        f"{name}. Value will be set to {earliest[tp]}.")  # fmt: skip
            out[tp] = earliest[tp]
        else:
            out[tp] = offset
    return out


def parse_offsets_csv(text: str) -> dict[str | None, dict[TP, int]]:
    """Kafka's reset CSV (ConsumerGroupCommand's --export / --from-file): `topic,partition,offset`
    lines (the group None: the one being reset) or `group,topic,partition,offset` lines."""
    out: dict[str | None, dict[TP, int]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) not in (3, 4):
            raise ValueError(f"line {number}: expected topic,partition,offset or "
                             f"group,topic,partition,offset, got {line!r}")  # fmt: skip
        group = cells[0] if len(cells) == 4 else None
        topic, partition, offset = cells[-3:]
        try:
            out.setdefault(group, {})[topic, int(partition)] = int(offset)
        except ValueError:
            raise ValueError(f"line {number}: partition and offset must be numbers, got "
                             f"{line!r}") from None  # fmt: skip
    return out


def offsets_csv(rows: list[PlanRow]) -> str:
    """--export: Kafka's CSV of a plan, with the group column when several groups are in it."""
    several = len({r.group_id for r in rows}) > 1
    return "".join(
        (f"{r.group_id}," if several else "") + f"{r.topic},{r.partition},{r.new_offset}\n"
        for r in rows
    )
