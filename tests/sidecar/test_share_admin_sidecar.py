"""KIP-932's offset admin through the sidecar, in front of tansu and Apache Kafka 4.4: the share
partition's start offset (SPSO) that DescribeShareGroupOffsets reports follows the records the
members acknowledged, and AlterShareGroupOffsets resets the live share partition, so the next
ShareFetch delivers from the new start offset, each record for the first time again."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from tests.share.test_share_admin import alter_offsets, describe_offsets, described
from tests.sidecar.test_share_fetch import _fetch_until, _ready
from tests.support.share_wire import (
    ACCEPT,
    RELEASE,
    ack_errors,
    deliveries,
    share_ack,
    share_fetch,
)
from tests.support.sidecar_util import Stack, Upstream, produce, stack, upstream

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]

NONE = int(ErrorCode.none)


async def test_start_offset_follows_acknowledgements_and_alter_resets_it(
    stack: Stack, upstream: Upstream
) -> None:
    client, topic, (group, tid) = await _ready(stack, upstream)
    try:
        opened = await client.call(share_fetch(group, "m1", 0, tid))  # starts at latest: 0
        assert opened.error_code == NONE
        await produce(upstream.bootstrap, topic, [f"k{i}" for i in range(5)])
        got = await _fetch_until(client, lambda e: share_fetch(group, "m1", e, tid,
                                                               max_wait_ms=500), 5, "5 records")
        epoch = 1 + len(got)
        acked = await client.call(share_ack(group, "m1", epoch, tid, {0: [
            (0, 2, ACCEPT), (3, 4, RELEASE)]}))
        assert ack_errors(acked) == {0: NONE}
        answer = described(await client.call(describe_offsets(group, {topic: (0,)})))
        assert answer == [(group, ErrorCode.none, None, [(topic, True, [
            (0, 3, 0, ErrorCode.none, None)])])]

        reset = await client.call(alter_offsets(group, {topic: {0: 1}}))
        assert reset.error_code == ErrorCode.none, reset
        answer = described(await client.call(describe_offsets(group)))
        assert answer == [(group, ErrorCode.none, None, [(topic, True, [
            (0, 1, 0, ErrorCode.none, None)])])]
        # A new session gets 1-4, each delivered for the first time: the state was reset. Its
        # opening ShareFetch may acquire them already (MaxWaitMs 0 takes what is there).
        reopened = await client.call(share_fetch(group, "m2", 0, tid))
        again = list(deliveries(reopened)[0].acquired)
        have = sum(last - first + 1 for first, last, _ in again)
        if have < 4:
            again += await _fetch_until(client, lambda e: share_fetch(
                group, "m2", e, tid, max_wait_ms=500), 4 - have, "1-4")
        assert sorted(again) == [(1, 4, 1)]
    finally:
        client.close()
