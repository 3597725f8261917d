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

Hand-written rather than kio's generated ConsumerProtocol* schemas, on purpose: kio's reader needs
the exact (known) version and raises on what it cannot read, while this reads any version,
including ones newer than kio knows, as the prefix they share.

Pure: no I/O.
"""

from __future__ import annotations

import struct

__all__ = ["assignment_partitions", "subscription_topics"]

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
