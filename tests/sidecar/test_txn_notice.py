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


def test_a_fencing_ends_older_epochs_and_other_producer_ids_of_its_transactional_id_only() -> None:
    added = n.AddedOffsets()
    added.add("tx", 7, 4, "same", 0)  # the epoch handed out: not over
    added.add("tx", 7, 3, "older", 0)
    added.add("tx", 6, 9, "other-pid", 0)  # a former producer id, even with a higher epoch
    added.add("tx", 7, 5, "newer", 0)  # a later epoch of the same id (read late): not over
    added.add("not-tx", 5, 0, "elsewhere", 0)
    over = added.fenced("tx", 7, 4)
    assert sorted((notice.producer_id, notice.producer_epoch, notice.committed, groups)
                  for notice, groups in over) == [(6, 9, None, {"other-pid"}),
                                                  (7, 3, None, {"older"})]  # fmt: skip
    assert len(added) == 3
    assert added.ended(7, 4) == {"same"} and added.ended(7, 5) == {"newer"}


def test_prune_forgets_only_what_began_before_the_limit() -> None:
    added = n.AddedOffsets()
    added.add("tx", 1, 0, "g", 1_000)
    added.add("tx", 1, 0, "h", 5_000)  # the same transaction: its start stays 1_000
    added.add("tx", 2, 0, "g", 2_000)
    added.prune(2_000)
    assert len(added) == 1 and added.ended(2, 0) == {"g"}


def test_a_notice_is_one_marker_with_one_partition_per_group() -> None:
    told = n.notice_request(n.Notice(7, 3, True), ["g1", "g2"])
    (marker,) = told.markers
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result,
            marker.coordinator_epoch) == (7, 3, True, n.OUTCOME_TOLD)  # fmt: skip
    assert [(t.name, t.partition_indexes) for t in marker.topics] == [("g1", (0,)), ("g2", (0,))]
    (shadow,) = n.notice_request(n.Notice(7, 3, None), ["g"]).markers
    assert (shadow.transaction_result, shadow.coordinator_epoch) == (False, n.OUTCOME_FROM_SHADOW)
    (aborted,) = n.notice_request(n.Notice(7, 3, False), ["g"]).markers
    assert (aborted.transaction_result, aborted.coordinator_epoch) == (False, n.OUTCOME_TOLD)


def test_an_answer_without_partitions_or_with_any_error_is_not_taken() -> None:
    frame = n.notice_response(
        5, n.NOTICE_VERSION,
        [(n.Notice(7, 3, True), {"g1": ErrorCode.none,
                                 "g2": ErrorCode.coordinator_load_in_progress}),
         (n.Notice(8, 0, None), {"g3": ErrorCode.none})],
    )  # fmt: skip
    assert n.unacknowledged(frame, ["g1", "g2", "g3", "g4"]) == {"g2", "g4"}
    response = n.rewrite.decode_response(n.WRITE_TXN_MARKERS, n.NOTICE_VERSION, frame)
    assert [m.producer_id for m in response.markers] == [7, 8]
    assert [p.partition_index for m in response.markers for t in m.topics
            for p in t.partitions] == [0, 0, 0]  # fmt: skip
