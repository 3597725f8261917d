"""coordinator.sidecar.txn_notice (issue 29): what a fleet member remembers of the transactions it
forwarded, and the outcome notice as a WriteTxnMarkers request and answer, on the wire."""

from __future__ import annotations

import io

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from coordinator.sidecar import txn_notice as n


def test_added_offsets_per_transaction() -> None:
    added = n.AddedOffsets()
    added.add("tx", 7, 0, "g1", 1_000)
    added.add("tx", 7, 0, "g2", 1_000)
    added.add("tx", 7, 1, "g3", 2_000)
    added.add("other", 9, 0, "g4", 3_000)
    assert added.ended(7, 0) == {"g1", "g2"} and added.ended(7, 0) == set()
    # InitProducerId answered (7, 2) for "tx": its epoch 1 transaction is over, outcome unknown.
    assert added.fenced("tx", 7, 2) == [(n.Notice(7, 1, None), {"g3"})]
    assert added.fenced("tx", 7, 2) == [] and len(added) == 1
    added.prune(3_001)
    assert len(added) == 0


def test_a_notice_round_trips_and_its_answer_names_what_was_not_taken() -> None:
    for notice in (n.Notice(7, 3, True), n.Notice(7, 3, False), n.Notice(7, 3, None)):
        request = n.notice_request(notice, ["g1", "g2"])
        buffer = io.BytesIO()
        entity_writer(type(request))(buffer, request)
        decoded, _ = entity_reader(type(request))(buffer.getvalue(), 0)
        assert n.read_notices(decoded) == [(notice, ["g1", "g2"])]
    frame = n.notice_response(
        5, n.NOTICE_VERSION,
        [(n.Notice(7, 3, True), {"g1": ErrorCode.none, "g2": ErrorCode.not_coordinator})],
    )  # fmt: skip
    assert n.unacknowledged(frame, ["g1", "g2"]) == {"g2"}
    assert n.unacknowledged(b"\x00\x00\x00\x04\x00\x00\x00\x05", ["g1"]) == {"g1"}
