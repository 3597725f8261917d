"""`groupcoord log dump DATA_DIR`: print the stored records, like kafka-dump-log --offsets-decoder.

Read-only: unlike opening the log it truncates nothing and resolves no compaction leftovers; it
shows them. Damaged regions and a torn tail are printed where they occur, so this is how a user
sees what start-up skipped (reference: docs/concepts.md, "Durability": damaged files).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

from coordinator.core.record_codec import decode_record
from coordinator.core.record_wire import RecordDecodeError
from coordinator.core.records import (
    AclKey,
    AclValue,
    GroupMetadataValue,
    OffsetCommitValue,
    Record,
    ScramCredentialKey,
    ScramCredentialValue,
    TopicKey,
    TopicValue,
    TxnOffsetKey,
    TxnOffsetValue,
)
from storage.compaction import CLEANED_SUFFIX, SWAP_SUFFIX, list_segments, segment_name
from storage.entry import Entry, EntryReader


def _describe(entry: Entry) -> str:
    try:
        record = decode_record(entry.key, entry.value)
    except (RecordDecodeError, ValueError) as e:
        return f"undecodable ({e}) key={entry.key.hex()}"
    if record is None:
        return f"unknown record type key={entry.key.hex()}"
    return _format_record(record)


def _format_record(record: Record) -> str:
    key = record.key
    value = record.value
    key_text = " ".join(f"{k}={getattr(key, k)!r}" for k in key.__slots__)
    kind = (
        "txn_offset" if isinstance(key, TxnOffsetKey)
        else "offset_commit" if hasattr(key, "partition")
        else "topic" if isinstance(key, TopicKey)
        else "acl" if isinstance(key, AclKey)
        else "scram_credential" if isinstance(key, ScramCredentialKey)
        else "group_metadata"
    )  # fmt: skip
    if value is None:
        return f"{kind} key: {{{key_text}}} payload: <DELETED>"
    if isinstance(value, OffsetCommitValue):
        payload = (
            f"offset={value.offset} leader_epoch={value.leader_epoch} "
            f"metadata={value.metadata!r} commit_timestamp_ms={value.commit_timestamp_ms} "
            f"expire_timestamp_ms={value.expire_timestamp_ms}"
        )
    elif isinstance(value, TopicValue):
        payload = (
            f"topic_id={uuid.UUID(bytes=value.topic_id)} partitions={value.partitions} "
            f"racks={[list(r) for r in value.racks]}"
        )
    elif isinstance(value, AclValue):
        payload = ""
    elif isinstance(value, ScramCredentialValue):  # salted keys only; shown by size, not value
        payload = f"iterations={value.iterations} salt_bytes={len(value.salt)}"
    elif isinstance(value, TxnOffsetValue):
        payload = (
            f"transactional_id={value.transactional_id!r} "
            f"producer_epoch={value.producer_epoch} offset={value.offset} "
            f"leader_epoch={value.leader_epoch} metadata={value.metadata!r} "
            f"commit_timestamp_ms={value.commit_timestamp_ms}"
        )
    elif isinstance(value, GroupMetadataValue):
        payload = _format_group(value)
    else:  # a KIP-848 consumer-group record (types 3-8, 16): its fields as they are
        kind = f"consumer_group_{type(key).__name__.removeprefix('ConsumerGroup').lower()}"
        payload = " ".join(f"{k}={getattr(value, k)!r}" for k in value.__slots__)
    return f"{kind} key: {{{key_text}}} payload: {{{payload}}}"


def _format_group(value: GroupMetadataValue) -> str:
    members = ", ".join(
        f"{{member_id={m.member_id!r} group_instance_id={m.group_instance_id!r} "
        f"client_id={m.client_id!r} client_host={m.client_host!r} "
        f"rebalance_timeout_ms={m.rebalance_timeout_ms} "
        f"session_timeout_ms={m.session_timeout_ms} "
        f"subscription_bytes={len(m.subscription)} assignment_bytes={len(m.assignment)}}}"
        for m in value.members
    )
    return (
        f"protocol_type={value.protocol_type!r} generation_id={value.generation_id} "
        f"protocol_name={value.protocol_name!r} leader={value.leader!r} "
        f"current_state_timestamp_ms={value.current_state_timestamp_ms} "
        f"metadata_hash={value.metadata_hash} members=[{members}]"
    )


def dump(data_dir: str | Path) -> Iterator[str]:
    """Printable lines: one per entry, plus damage, torn tails and compaction leftovers."""
    directory = Path(data_dir)
    if not directory.is_dir():
        yield f"no such directory: {directory}"
        return
    for p in sorted(directory.iterdir()):
        if p.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)):
            yield f"compaction leftover: {p.name} (resolved at the next start-up)"
    total = damaged = 0
    for base in list_segments(directory):
        path = directory / segment_name(base)
        data = path.read_bytes()
        yield f"Dumping {path} ({len(data)} bytes)"
        reader = EntryReader(data)
        printed = 0  # damage is known once the reader passed it; print it in order
        for entry in reader:
            for d in reader.damages[printed:]:
                yield f"DAMAGED position: {d.position} skipped_bytes: {d.length_bytes}"
            printed = len(reader.damages)
            total += 1
            yield f"offset: {entry.offset} timestamp_ms: {entry.timestamp_ms} {_describe(entry)}"
        for d in reader.damages[printed:]:
            yield f"DAMAGED position: {d.position} skipped_bytes: {d.length_bytes}"
        damaged += len(reader.damages)
        if reader.tail_bytes:
            yield (
                f"TORN TAIL position: {reader.valid_end} bytes: {reader.tail_bytes} "
                "(truncated at the next start-up)"
            )
    yield f"entries: {total} damaged_regions: {damaged}"
