"""Record type 4 (ConsumerGroupPartitionMetadata, written by Kafka 4.0 and before; superseded by
the metadata hash of KIP-1101) as Kafka writes it: each topic's partitions with their racks,
which the codec reads and drops. Pinned where `make mutation` found the reading loose: the
codec's own records carry no partitions, so only Kafka's bytes reach that code."""

from __future__ import annotations

import struct
import uuid

from coordinator.core.consumer.codec import decode_value
from coordinator.core.consumer.records import (
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    PartitionMetadataTopic,
)
from tests.core.test_pin_consumer_codec import kafka_uvarint


def compact(text: str) -> bytes:
    return kafka_uvarint(len(text.encode()) + 1) + text.encode()


def test_kafka_40s_partition_metadata_with_racks_is_read() -> None:
    tid = uuid.UUID(int=0x1234_5678)
    racks = {0: ("rack-a", "rack-b"), 1: ("rack-c",)}
    partitions = kafka_uvarint(len(racks) + 1) + b"".join(
        struct.pack(">i", p) + kafka_uvarint(len(rs) + 1) + b"".join(compact(r) for r in rs)
        + b"\x00"  # the partition's tagged fields
        for p, rs in racks.items()
    )  # fmt: skip
    topic = tid.bytes + compact("orders") + struct.pack(">i", 2) + partitions + b"\x00"
    data = struct.pack(">h", 0) + kafka_uvarint(2) + topic + b"\x00"
    value = decode_value(ConsumerGroupPartitionMetadataKey("g"), data)
    assert value == ConsumerGroupPartitionMetadataValue((PartitionMetadataTopic(tid, "orders", 2),))
