"""KIP-932 at the wire: ShareFetch / ShareAcknowledge requests (kio) and what their answers say,
for tests that drive a sidecar (or a Kafka broker) without a share-consumer client."""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass
from typing import Any

from tests.support.sidecar_util import RawClient, kio, metadata

ACCEPT, RELEASE, REJECT = 1, 2, 3
MS = datetime.timedelta(milliseconds=1)


def share_fetch(group: str, member: str, epoch: int, topic_id: uuid.UUID | None,
                partitions: tuple[int, ...] = (0,), *, acks: dict[int, list[tuple[int, int, int]]]
                | None = None, max_records: int = 500, max_wait_ms: int = 0, version: int = 1,
                forget: tuple[int, ...] = ()) -> Any:
    """ShareFetch of `partitions` of one topic; `acks`: partition -> [(first, last, type)]."""
    acks = acks or {}
    parts = tuple(
        kio(78, version, "FetchPartition", partition_index=p, acknowledgement_batches=tuple(
            kio(78, version, "AcknowledgementBatch", first_offset=f, last_offset=last,
                acknowledge_types=(t,))
            for f, last, t in acks.get(p, [])))
        for p in sorted(set(partitions) | set(acks)))
    topics = (kio(78, version, "FetchTopic", topic_id=topic_id, partitions=parts),) if parts else ()
    forgotten = (kio(78, version, "ForgottenTopic", topic_id=topic_id, partitions=forget),) \
        if forget else ()
    return kio(78, version, "ShareFetchRequest", group_id=group, member_id=member,
               share_session_epoch=epoch, max_wait=max_wait_ms * MS, min_bytes=1,
               max_records=max_records, batch_size=max_records, topics=topics,
               forgotten_topics_data=forgotten)


def share_ack(group: str, member: str, epoch: int, topic_id: uuid.UUID,
              acks: dict[int, list[tuple[int, int, int]]], version: int = 1) -> Any:
    topics = (kio(79, version, "AcknowledgeTopic", topic_id=topic_id, partitions=tuple(
        kio(79, version, "AcknowledgePartition", partition_index=p, acknowledgement_batches=tuple(
            kio(79, version, "AcknowledgementBatch", first_offset=f, last_offset=last,
                acknowledge_types=(t,)) for f, last, t in batches))
        for p, batches in acks.items())),)
    return kio(79, version, "ShareAcknowledgeRequest", group_id=group, member_id=member,
               share_session_epoch=epoch, topics=topics)


@dataclass
class Delivery:
    """One partition's part of a ShareFetch answer."""

    error: int
    ack_error: int
    acquired: list[tuple[int, int, int]]  # (first, last, delivery count)
    records: bytes

    @property
    def offsets(self) -> list[int]:
        return [o for first, last, _ in self.acquired for o in range(first, last + 1)]


def deliveries(response: Any) -> dict[int, Delivery]:
    return {p.partition_index: Delivery(
        int(p.error_code), int(p.acknowledge_error_code),
        [(int(a.first_offset), int(a.last_offset), int(a.delivery_count))
         for a in p.acquired_records], bytes(p.records or b""))
        for t in response.responses for p in t.partitions}


def ack_errors(response: Any) -> dict[int, int]:
    return {p.partition_index: int(p.error_code) for t in response.responses
            for p in t.partitions}


async def topic_id(client: RawClient, topic: str) -> uuid.UUID:
    """The topic's id, once every partition of it answers ListOffsets: a partition that Kafka
    has named a leader for may not be served by it yet (NOT_LEADER_OR_FOLLOWER for a moment
    after CreateTopics), and a share partition that cannot read its start offset then starts at
    a later fetch, at `latest`, after records a test has produced meanwhile."""
    response = await client.call(metadata([topic]))
    found = [t for t in response.topics if t.name == topic and t.error_code == 0]
    assert found and found[0].topic_id is not None, response
    parts = tuple(kio(2, 5, "ListOffsetsPartition", partition_index=p.partition_index,
                      current_leader_epoch=-1, timestamp=-1) for p in found[0].partitions)
    offsets = await client.call(kio(2, 5, "ListOffsetsRequest", replica_id=-1, isolation_level=0,
                                    topics=(kio(2, 5, "ListOffsetsTopic", name=topic,
                                                partitions=parts),)))
    errors = [p.error_code for t in offsets.topics for p in t.partitions]
    assert parts and errors == [0] * len(parts), offsets
    return found[0].topic_id
