"""The consumer protocol's embedded bytes: ConsumerProtocolSubscription (a JoinGroup member's
metadata when the protocol type is "consumer") and ConsumerProtocolAssignment (a SyncGroup
assignment). The one reader of both; the coordinator core (subscribed topics, KIP-1101), the
status page and the groups CLI all use it.

Rules:
- Every version (0-3 today) starts with the v0 fields, so any version is read as its v0 prefix:
  subscription = int16 version, [topic: string], user data: bytes; assignment = int16 version,
  [topic: string, [partition: int32]], user data. Later fields (owned partitions, generation,
  rack) and trailing bytes are ignored: the coordinator needs only the topics and partitions.
- It never raises: bytes that do not parse give None ("unknown"), as Kafka's ClassicGroup treats a
  subscription it cannot deserialize. A negative user-data length is null, as Kafka's generated
  reader takes it.
- `subscription` reads a version's later fields too (owned partitions v1+, generation v2+, rack
  v3+; a version above 3 as v3, as Kafka's ConsumerProtocol does), and `encode_assignment` writes
  an assignment at a version (capped at 3, Kafka's checkAssignmentVersion): what the online
  upgrade/downgrade between classic and KIP-848 consumer groups needs (issue 23 item 6).

Hand-written rather than kio's generated ConsumerProtocol* schemas, on purpose: kio's reader needs
the exact (known) version and raises on what it cannot read, while this reads any version,
including ones newer than kio knows, as the prefix they share.

Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "Subscription",
    "assignment_partitions",
    "encode_assignment",
    "subscription",
    "subscription_topics",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def _string(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = _I16.unpack_from(data, pos)
    pos += 2
    if length < 0 or pos + length > len(data):
        raise ValueError("bad string")
    return data[pos : pos + length].decode("utf-8", errors="replace"), pos + length


def _user_data_fits(data: bytes, pos: int) -> bool:
    length: int = _I32.unpack_from(data, pos)[0]
    return pos + 4 + max(length, 0) <= len(data)


def subscription_topics(data: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription, in order; None if it does not parse."""
    try:
        _I16.unpack_from(data, 0)  # the version: any
        (count,) = _I32.unpack_from(data, 2)
        pos = 6
        if count < 0:
            return None
        topics: list[str] = []
        for _ in range(count):
            topic, pos = _string(data, pos)
            topics.append(topic)
        return topics if _user_data_fits(data, pos) else None
    except (struct.error, ValueError):
        return None


def assignment_partitions(data: bytes) -> dict[str, list[int]] | None:
    """topic -> sorted partitions of a ConsumerProtocolAssignment ({} for empty bytes: no
    assignment yet); None if it does not parse. A topic listed twice has its lists merged."""
    if not data:
        return {}
    try:
        _I16.unpack_from(data, 0)
        (count,) = _I32.unpack_from(data, 2)
        pos = 6
        if count < 0:
            return None
        out: dict[str, list[int]] = {}
        for _ in range(count):
            topic, pos = _string(data, pos)
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
            if n < 0 or pos + 4 * n > len(data):
                return None
            out.setdefault(topic, []).extend(struct.unpack_from(f">{n}i", data, pos))
            pos += 4 * n
    except (struct.error, ValueError):
        return None
    return {t: sorted(ps) for t, ps in out.items()}


@dataclass(frozen=True, slots=True)
class Subscription:
    """A ConsumerProtocolSubscription's fields the coordinator uses."""

    version: int
    topics: tuple[str, ...]
    owned_partitions: dict[str, list[int]]  # v1+; {} before
    rack_id: str | None  # v3+; None before


def _partitions_list(data: bytes, pos: int) -> tuple[dict[str, list[int]], int]:
    (count,) = _I32.unpack_from(data, pos)
    pos += 4
    if count < 0:
        raise ValueError("bad array")
    out: dict[str, list[int]] = {}
    for _ in range(count):
        topic, pos = _string(data, pos)
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + 4 * n > len(data):
            raise ValueError("bad partitions")
        out.setdefault(topic, []).extend(struct.unpack_from(f">{n}i", data, pos))
        pos += 4 * n
    return out, pos


def subscription(data: bytes) -> Subscription | None:
    """The whole ConsumerProtocolSubscription (Kafka's deserializeConsumerProtocolSubscription);
    None if it does not parse (Kafka's SchemaException)."""
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version < 0:
            return None
        topics = subscription_topics(data)
        if topics is None:
            return None
        pos = 6
        for _ in topics:
            (length,) = _I16.unpack_from(data, pos)
            pos += 2 + length
        (user_data,) = _I32.unpack_from(data, pos)
        pos += 4 + max(user_data, 0)
        owned: dict[str, list[int]] = {}
        rack_id: str | None = None
        if version >= 1:
            owned, pos = _partitions_list(data, pos)
        if version >= 2:
            pos += 4  # GenerationId
            if pos > len(data):
                return None
        if version >= 3:
            (length,) = _I16.unpack_from(data, pos)
            if length >= 0:
                rack_id, pos = _string(data, pos)
    except (struct.error, ValueError):
        return None
    return Subscription(version, tuple(topics), owned, rack_id)


def encode_assignment(partitions: Mapping[str, Iterable[int]], version: int) -> bytes:
    """A ConsumerProtocolAssignment (no user data) at `version`, capped at 3; topics and
    partitions ascending."""
    out = bytearray(_I16.pack(min(max(version, 0), 3)))
    topics = sorted((t, sorted(ps)) for t, ps in partitions.items() if ps)
    out += _I32.pack(len(topics))
    for topic, ps in topics:
        name = topic.encode()
        out += _I16.pack(len(name)) + name + _I32.pack(len(ps))
        out += struct.pack(f">{len(ps)}i", *ps)
    out += _I32.pack(-1)  # user data: null
    return bytes(out)
