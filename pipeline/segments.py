"""Finding history segments and decoding them into rows: the part of the data source without Spark.

Paths given to the audit may be a data dir (`<dir>/history/` is read, never the group log beside
it), a history dir itself (named `history`, or holding a `coordinator.id`), or any directory above
many data dirs (every `history/` below it is read: the histories of a fleet of coordinators copied
side by side). Each segment is read whole, through storage/entry.py's reader
(damaged entries and a torn tail are skipped, as the coordinator itself does) and
storage/history.py's decoder.

Rows carry the coordinator's id (`coordinator.id` next to the segments, else the segment's own
SEGMENT_STARTED header, else the directory's path), so histories of many coordinators stay apart.
Entries this reader cannot decode (a newer codec version) are skipped and counted.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storage.entry import EntryReader
from storage.history import (
    FIELD_TYPES,
    HistoryDecodeError,
    Kind,
    decode_fields,
    make_row_decoder,
)
from storage.history_log import HISTORY_DIR, ID_FILE, list_segment_files, read_coordinator_id

# The columns every row has, then one column per codec field (minus the header-only ones).
BASE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("coordinator_id", "string"),
    ("segment", "string"),
    ("offset", "long"),
    ("ts", "timestamp"),
    ("group_id", "string"),
    ("event", "string"),
)
_HEADER_ONLY = {"coordinator_id", "host"}
_INT_FIELDS = {"generation_id", "members"}
FIELD_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (
        name,
        "string"
        if ftype == "str"
        else "array<string>"
        if ftype == "strs"
        else "int"
        if name in _INT_FIELDS
        else "long",
    )
    for name, ftype in FIELD_TYPES.items()
    if name not in _HEADER_ONLY
)
# Last, so the positions above stay what they were: the coordinator process that wrote the event.
# For a history directory it is the directory's coordinator (coordinator_id); for a fleet's
# history topic (pipeline/topic.py) coordinator_id is the fleet's, one per topic, since the fleet
# is ONE coordinator whose groups move between members, and this names the member.
WRITER_COLUMNS: tuple[tuple[str, str], ...] = (("written_by", "string"),)
COLUMNS = BASE_COLUMNS + FIELD_COLUMNS + WRITER_COLUMNS
_SQL_TYPES = {"string": "STRING", "long": "BIGINT", "int": "INT", "timestamp": "TIMESTAMP"}
SCHEMA_DDL = ", ".join(f"{name} {_SQL_TYPES.get(t, 'ARRAY<STRING>')}" for name, t in COLUMNS)

_POSITION = {name: i for i, (name, _) in enumerate(COLUMNS)}
_N = len(COLUMNS)
_EVENT_NAMES = {kind.value: kind.name.lower() for kind in Kind}
decode_into = make_row_decoder({n: i for n, i in _POSITION.items() if n not in _HEADER_ONLY})
_TS = _POSITION["ts"]
_WRITTEN_BY = _POSITION["written_by"]


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One segment to read: a Spark input partition."""

    path: str
    coordinator_id: str | None
    size_bytes: int
    mtime_ms: int


def history_dirs(root: Path) -> list[Path]:
    """The history directories at or below `root` (see the module docstring)."""
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such directory")
    # A data dir holds the group log's segments too (same file names): never read those.
    if (root / HISTORY_DIR).is_dir():
        return [root / HISTORY_DIR]
    if (root / ID_FILE).is_file() or root.name == HISTORY_DIR:
        return [root]
    found: list[Path] = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames.sort()
        if os.path.basename(dirpath) == HISTORY_DIR:
            path = Path(dirpath)
            if (path / ID_FILE).is_file() or list_segment_files(path):
                found.append(path)
            dirnames.clear()
    return found


def find_segments(roots: Iterable[str | Path], since_ms: int | None = None) -> list[SegmentRef]:
    """Every segment under `roots`, each once. A segment last written before `since_ms` holds
    nothing newer, so it is left out (a copied file has a newer mtime: never wrongly pruned)."""
    out: list[SegmentRef] = []
    seen: set[str] = set()
    for root in roots:
        for directory in history_dirs(Path(root).resolve()):
            cid = read_coordinator_id(directory)
            for path in list_segment_files(directory):
                key = str(path)
                if key in seen:
                    continue
                seen.add(key)
                st = path.stat()
                mtime_ms = st.st_mtime_ns // 1_000_000
                if since_ms is not None and mtime_ms < since_ms:
                    continue
                out.append(SegmentRef(key, cid, st.st_size, mtime_ms))
    return out


@dataclass(slots=True)
class ReadStats:
    entries: int = 0
    rows: int = 0
    undecodable: int = 0
    damaged_regions: int = 0


def segment_rows(
    ref: SegmentRef,
    *,
    groups: frozenset[str] | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    stats: ReadStats | None = None,
) -> Iterator[list[Any]]:
    """The rows of one segment, in COLUMNS order (`ts` in ms since the epoch)."""
    stats = stats if stats is not None else ReadStats()
    path = Path(ref.path)
    reader = EntryReader(path.read_bytes())
    cid = ref.coordinator_id
    name = path.name
    group_keys = None if groups is None else {g.encode("utf-8", "surrogatepass") for g in groups}
    low = since_ms if since_ms is not None else -(2**63)
    high = until_ms if until_ms is not None else 2**63
    for offset, ts, key, value in reader:
        stats.entries += 1
        if value is None or len(value) < 2:
            continue
        if value[1] == Kind.SEGMENT_STARTED:  # the segment's header, not an event
            if cid is None:
                with contextlib.suppress(HistoryDecodeError):
                    cid = str(decode_fields(value)[1][0])
            continue
        if group_keys is not None and key not in group_keys:
            continue
        if not low <= ts < high:
            continue
        row: list[Any] = [None] * _N
        try:
            code = decode_into(value, row)
        except HistoryDecodeError:
            stats.undecodable += 1
            continue
        row[0] = row[_WRITTEN_BY] = cid if cid is not None else str(path.parent)
        row[1] = name
        row[2] = offset
        row[3] = ts
        row[4] = key.decode("utf-8", "surrogatepass")
        row[5] = _EVENT_NAMES.get(code) or f"unknown_{code}"
        stats.rows += 1
        yield row
    stats.damaged_regions += len(reader.damages)


def decode_row(
    value: bytes,
    *,
    coordinator_id: str,
    segment: str,
    offset: int,
    ts: int,
    group_id: str,
    written_by: str | None,
) -> list[Any]:
    """One entry's row in COLUMNS order, for readers of other sources than segment files
    (pipeline/topic.py). Raises HistoryDecodeError as the codec does."""
    row: list[Any] = [None] * _N
    code = decode_into(value, row)
    row[0] = coordinator_id
    row[1] = segment
    row[2] = offset
    row[3] = ts
    row[4] = group_id
    row[5] = _EVENT_NAMES.get(code) or f"unknown_{code}"
    row[_WRITTEN_BY] = written_by
    return row


def arrow_schema(timezone: str = "UTC") -> Any:
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "long": pa.int64(),
        "int": pa.int32(),
        "timestamp": pa.timestamp("us", tz=timezone),
        "array<string>": pa.list_(pa.string()),
    }
    return pa.schema([pa.field(name, types[t]) for name, t in COLUMNS])


def to_record_batch(rows: list[list[Any]], schema: Any) -> Any:
    """Rows (as from segment_rows) -> one pyarrow RecordBatch of `schema`."""
    import pyarrow as pa

    columns = list(zip(*rows, strict=True)) if rows else [()] * _N
    arrays = []
    for i, f in enumerate(schema):
        col = columns[i]
        if i == _TS:
            arrays.append(pa.array([t * 1000 for t in col], pa.int64()).cast(f.type))
        else:
            arrays.append(pa.array(col, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def segment_batches(
    ref: SegmentRef,
    *,
    batch_rows: int = 32_768,
    timezone: str = "UTC",
    **filters: Any,
) -> Iterator[Any]:
    """segment_rows as pyarrow RecordBatches of at most batch_rows rows."""
    return record_batches(segment_rows(ref, **filters), batch_rows=batch_rows, timezone=timezone)


def record_batches(
    source: Iterable[list[Any]], *, batch_rows: int = 32_768, timezone: str = "UTC"
) -> Iterator[Any]:
    """Rows in COLUMNS order as pyarrow RecordBatches of at most batch_rows rows."""
    schema = arrow_schema(timezone)
    rows: list[list[Any]] = []
    for row in source:
        rows.append(row)
        if len(rows) >= batch_rows:
            yield to_record_batch(rows, schema)
            rows = []
    if rows:
        yield to_record_batch(rows, schema)
