"""The history codec: what one entry of the history log means.

The history log (coordinator/serve/history.py writes it, pipeline/ reads it) is a sequence of
storage/entry.py entries in segment files under `<data-dir>/history/` (storage/history_log.py).
Each entry is one thing that happened to a group:

    entry.key           the group id, UTF-8 (b"" for the segment header)
    entry.timestamp_ms  wall clock of the event, ms since the epoch
    entry.value         codec_version u8 | kind u8 | the kind's fields, in the order of KIND_FIELDS

Field encodings (big-endian): `str` is i32 length (-1 = null) + UTF-8; `int` is i64; `strs` is
i32 count (-1 = null) + that many `str`.

Versioning (the rules a reader and a writer keep):
- CODEC_VERSION is 1. A field added later goes at the END of its kind's list; a version-1 reader
  reads the fields it knows and ignores trailing bytes, so old readers keep working. An entry
  written before such fields were added ends where they would start: they read as null (the
  kind's first KIND_REQUIRED fields must be there), so new readers read old logs.
- A kind a reader does not know decodes to (kind, ()) and is reported by name as `unknown_<n>`.
- Any other change (removing, reordering or retyping a field) bumps CODEC_VERSION; a reader meets
  a version it does not know with HistoryDecodeError (the caller counts it and skips the entry).

On a sidecar fleet's history topic (coordinator/sidecar/history_topic.py writes it,
pipeline/topic.py reads it) a record is the same entry: key = the group id, value = the codec's
value above, timestamp = the event's wall clock (CreateTime), and the header WRITER_HEADER = the
id of the fleet member that wrote it (the topic has no segment headers to say so).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

CODEC_VERSION = 1

HISTORY_TOPIC = "__groupcoord_history"  # a fleet's history topic, unless --history-topic says
WRITER_HEADER = "gc.coordinator"  # on the history topic: the id of the member that wrote a record

FieldType = Literal["str", "int", "strs"]
FieldValue = str | int | tuple[str, ...] | None


class Kind(enum.IntEnum):
    SEGMENT_STARTED = 0  # the first entry of every segment: which coordinator wrote it
    GROUP_CREATED = 1
    GROUP_EMPTIED = 2  # the last member left: the group reached Empty after a rebalance
    GROUP_DELETED = 3  # DeleteGroups, or offsets expiry removed an empty group
    REBALANCE_STARTED = 4  # the trigger: member (id, instance, client, host) or topics
    JOIN_PHASE_COMPLETED = 5
    REBALANCE_COMPLETED = 6  # with the trigger of the rebalance it completes
    MEMBER_JOINED = 7
    MEMBER_LEFT = 8  # `reason`: left, expired, fenced, not_rejoined, sync_expired, max_size
    PROTOCOL_SELECTED = 9  # the group's protocol was chosen for the first time, or changed
    METADATA_CHANGED = 10  # the hash of a subscribed topic's metadata changed (KIP-1101)
    OFFSETS_COMMITTED = 11  # a summary: commits in [timestamp, timestamp + window_ms)
    OFFSETS_EXPIRED = 12
    OFFSETS_DELETED = 13
    MEMBER_RECONCILED = 14  # KIP-848: a member reached its target assignment (issue 23)


KIND_NAMES: dict[int, str] = {k.value: k.name.lower() for k in Kind}

# Every field any kind has, with its type. Column order of the pipeline's schema.
FIELD_TYPES: dict[str, FieldType] = {
    "cause": "str",
    "member_id": "str",
    "group_instance_id": "str",
    "client_id": "str",
    "client_host": "str",
    "reason": "str",
    "generation_id": "int",
    "protocol_name": "str",
    "previous_protocol": "str",
    "leader": "str",
    "members": "int",
    "join_ms": "int",
    "rebalance_ms": "int",
    "topics": "strs",
    "commits": "int",
    "partitions": "int",
    "window_ms": "int",
    "coordinator_id": "str",
    "host": "str",
    # Added by issue 23 (KIP-848 consumer groups); new fields go last (the pipeline's columns).
    "group_type": "str",
    "reconcile_ms": "int",
}

# Who or what triggered a rebalance (coordinator.core.events.RebalanceTrigger), added to
# REBALANCE_STARTED and REBALANCE_COMPLETED after their first fields (issue 24).
TRIGGER_FIELDS = ("member_id", "group_instance_id", "client_id", "client_host", "topics")

KIND_FIELDS: dict[Kind, tuple[str, ...]] = {
    Kind.SEGMENT_STARTED: ("coordinator_id", "host"),
    Kind.GROUP_CREATED: (),
    Kind.GROUP_EMPTIED: ("generation_id",),
    Kind.GROUP_DELETED: (),
    Kind.REBALANCE_STARTED: ("cause", *TRIGGER_FIELDS),
    Kind.JOIN_PHASE_COMPLETED: ("generation_id", "protocol_name", "members", "join_ms"),
    Kind.REBALANCE_COMPLETED: (
        "generation_id",
        "protocol_name",
        "leader",
        "members",
        "cause",
        "join_ms",
        "rebalance_ms",
        *TRIGGER_FIELDS,
        "group_type",  # "classic" or "consumer" (KIP-848); null in history written before
    ),
    Kind.MEMBER_JOINED: ("member_id", "group_instance_id", "client_id", "client_host"),
    Kind.MEMBER_LEFT: ("member_id", "group_instance_id", "client_id", "client_host", "reason"),
    Kind.PROTOCOL_SELECTED: ("protocol_name", "previous_protocol", "generation_id"),
    Kind.METADATA_CHANGED: ("topics",),
    Kind.OFFSETS_COMMITTED: ("commits", "partitions", "window_ms"),
    Kind.OFFSETS_EXPIRED: ("partitions",),
    Kind.OFFSETS_DELETED: ("partitions",),
    # generation_id: the member epoch it reached; reconcile_ms: since the rebalance started.
    Kind.MEMBER_RECONCILED: ("member_id", "generation_id", "reconcile_ms"),
}

# How many of a kind's fields every entry of it has; the rest were added later and may be missing
# from old entries (read as null). A kind not listed: all of them.
KIND_REQUIRED: dict[Kind, int] = {
    Kind.REBALANCE_STARTED: 2,  # cause, member_id
    Kind.REBALANCE_COMPLETED: 7,  # up to rebalance_ms
}

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_HEAD = struct.Struct(">BB")


class HistoryDecodeError(ValueError):
    """An entry value this codec cannot read (unknown version, or truncated)."""


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One history entry, decoded. `fields` holds exactly the kind's fields (None = null)."""

    kind: Kind
    timestamp_ms: int
    group_id: str
    fields: Mapping[str, FieldValue] = field(default_factory=dict)

    def get(self, name: str) -> FieldValue:
        return self.fields.get(name)


def _put_str(out: list[bytes], value: object) -> None:
    if value is None:
        out.append(_I32.pack(-1))
        return
    if not isinstance(value, str):
        raise TypeError(f"expected str or None, got {value!r}")
    data = value.encode("utf-8", "surrogatepass")
    out.append(_I32.pack(len(data)))
    out.append(data)


def encode_fields(kind: Kind, values: Sequence[FieldValue]) -> bytes:
    """The entry value for `kind`, its fields given positionally in KIND_FIELDS order. The fields
    after KIND_REQUIRED may be left off (an entry as an older writer wrote it)."""
    names = KIND_FIELDS[kind]
    required = KIND_REQUIRED.get(kind, len(names))
    if not required <= len(values) <= len(names):
        raise ValueError(f"{kind.name}: expected {len(names)} fields, got {len(values)}")
    names = names[: len(values)]
    out = [_HEAD.pack(CODEC_VERSION, kind)]
    for name, value in zip(names, values, strict=True):
        ftype = FIELD_TYPES[name]
        if ftype == "str":
            _put_str(out, value)
        elif ftype == "int":
            if not isinstance(value, int):
                raise TypeError(f"{kind.name}.{name}: expected int, got {value!r}")
            out.append(_I64.pack(value))
        elif value is None:
            out.append(_I32.pack(-1))  # a null list
        else:
            if not isinstance(value, tuple):
                raise TypeError(f"{kind.name}.{name}: expected tuple of str, got {value!r}")
            out.append(_I32.pack(len(value)))
            for item in value:
                _put_str(out, item)
    return b"".join(out)


def encode_event(event: HistoryEvent) -> tuple[bytes, bytes]:
    """(key, value) of the entry for `event`; its timestamp goes in the entry header."""
    values = [event.fields.get(name) for name in KIND_FIELDS[event.kind]]
    return event.group_id.encode("utf-8", "surrogatepass"), encode_fields(event.kind, values)


def _get_str(buf: bytes, pos: int) -> tuple[str | None, int]:
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise HistoryDecodeError("string runs past the end of the value")
    return buf[pos:end].decode("utf-8", "surrogatepass"), end


def decode_fields(value: bytes) -> tuple[int, tuple[FieldValue, ...]]:
    """(kind code, the kind's field values in KIND_FIELDS order). An unknown kind -> (code, ())."""
    if len(value) < 2:
        raise HistoryDecodeError("value shorter than its 2-byte head")
    version, code = value[0], value[1]
    if version != CODEC_VERSION:
        raise HistoryDecodeError(f"codec version {version} (this reader knows {CODEC_VERSION})")
    try:
        kind = Kind(code)
    except ValueError:
        return code, ()
    pos = 2
    out: list[FieldValue] = []
    names = KIND_FIELDS[kind]
    required = KIND_REQUIRED.get(kind, len(names))
    try:
        for i, name in enumerate(names):
            if i >= required and pos == len(value):  # written before this field was added
                out.extend([None] * (len(names) - i))
                break
            ftype = FIELD_TYPES[name]
            if ftype == "str":
                text, pos = _get_str(value, pos)
                out.append(text)
            elif ftype == "int":
                out.append(_I64.unpack_from(value, pos)[0])
                pos += 8
            else:
                (count,) = _I32.unpack_from(value, pos)
                pos += 4
                if count < 0:
                    out.append(None)
                    continue
                items: list[str] = []
                for _ in range(count):
                    text, pos = _get_str(value, pos)
                    items.append(text or "")
                out.append(tuple(items))
    except (struct.error, UnicodeDecodeError) as exc:
        raise HistoryDecodeError(f"{kind.name}: {exc}") from None
    return code, tuple(out)


def decode_event(key: bytes, value: bytes, timestamp_ms: int) -> HistoryEvent | None:
    """The event of one entry; None for a kind this reader does not know."""
    code, values = decode_fields(value)
    if code not in KIND_NAMES:
        return None
    kind = Kind(code)
    return HistoryEvent(
        kind,
        timestamp_ms,
        key.decode("utf-8", "surrogatepass"),
        dict(zip(KIND_FIELDS[kind], values, strict=True)),
    )


def kind_name(code: int) -> str:
    return KIND_NAMES.get(code) or f"unknown_{code}"


RowDecoder = Callable[[bytes, list[Any]], int]
_TYPE_CODES = {"str": 0, "int": 1, "strs": 2}


def make_row_decoder(positions: Mapping[str, int]) -> RowDecoder:
    """A decoder for bulk readers: `decode_into(value, row) -> kind code` writes each field of the
    entry into `row[positions[field]]` (fields without a position are skipped; `strs` become
    lists) and returns the kind code, an unknown one leaving `row` untouched. Same rules and
    errors as `decode_fields`, without the per-field calls and tuples (pipeline/ decodes
    millions of entries with it)."""
    plans: dict[int, tuple[tuple[int, int], ...]] = {
        kind.value: tuple(
            (positions.get(name, -1), _TYPE_CODES[FIELD_TYPES[name]]) for name in names
        )
        for kind, names in KIND_FIELDS.items()
    }
    # Fields from this index on may be missing (KIND_REQUIRED): the row keeps its None there.
    optional_from = {
        kind.value: KIND_REQUIRED.get(kind, len(names)) for kind, names in KIND_FIELDS.items()
    }
    i32 = _I32.unpack_from
    i64 = _I64.unpack_from

    def decode_into(value: bytes, row: list[Any]) -> int:
        size = len(value)
        if size < 2:
            raise HistoryDecodeError("value shorter than its 2-byte head")
        if value[0] != CODEC_VERSION:
            raise HistoryDecodeError(
                f"codec version {value[0]} (this reader knows {CODEC_VERSION})"
            )
        code = value[1]
        plan = plans.get(code)
        if plan is None:
            return code
        pos = 2
        v: Any
        first_optional = optional_from[code]
        try:
            for i, (col, ftype) in enumerate(plan):
                if i >= first_optional and pos == size:  # an entry older than these fields
                    break
                if ftype == 0:
                    (n,) = i32(value, pos)
                    pos += 4
                    if n < 0:
                        v = None
                    else:
                        end = pos + n
                        if end > size:
                            raise HistoryDecodeError("string runs past the end of the value")
                        v = value[pos:end].decode("utf-8", "surrogatepass")
                        pos = end
                elif ftype == 1:
                    (v,) = i64(value, pos)
                    pos += 8
                else:
                    (count,) = i32(value, pos)
                    pos += 4
                    v = None if count < 0 else []
                    for _ in range(max(count, 0)):
                        (n,) = i32(value, pos)
                        pos += 4
                        end = pos + max(n, 0)
                        if end > size:
                            raise HistoryDecodeError("string runs past the end of the value")
                        v.append(value[pos:end].decode("utf-8", "surrogatepass"))
                        pos = end
                if col >= 0:
                    row[col] = v
        except (struct.error, UnicodeDecodeError) as exc:
            raise HistoryDecodeError(f"kind {code}: {exc}") from None
        return code

    return decode_into
