"""A consume-transform-produce application with confluent-kafka, exactly-once (issue 29's kill -9
test): copies every record of --input to --output, each poll's records in one transaction with
the consumer's offsets (send_offsets_to_transaction). Prints one JSON line per committed
transaction ({"txn": t, "copied": n} since start), after its commit returned. Each output
record's value is "<run>:<t>": which run and transaction wrote it. Runs until killed. A failed
transaction is aborted and the consumer rewound to its committed offsets, as the confluent-kafka
EOS example does.

Both clients set metadata.recovery.strategy=none: a sidecar restart is, to the application, its
whole cluster gone (the sidecar is its only broker), on which librdkafka 2.x re-bootstraps by
default, and after that re-bootstrap the copier's consumer made no progress in about one run of
three (it kept asking the restarted sidecar for its committed offsets, answered every time,
without fetching); with re-bootstrap off the same test passed 8 runs of 8
(docs/exactly-once.md).
"""

from __future__ import annotations

import argparse
import json
import sys

from confluent_kafka import Consumer, KafkaException, Producer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--run", default="0")
    args = ap.parse_args()
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": args.group,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": "read_committed", "session.timeout.ms": 2000,
        "heartbeat.interval.ms": 300, "metadata.recovery.strategy": "none",
    })
    producer = Producer({
        "bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id,
        "transaction.timeout.ms": 10000, "linger.ms": 5, "metadata.recovery.strategy": "none",
    })
    producer.init_transactions(30)
    consumer.subscribe([args.input])
    copied = txn = 0
    while True:
        msgs = [m for m in consumer.consume(args.batch, 0.5) if not m.error()]
        if not msgs:
            continue
        txn += 1
        tag = f"{args.run}:{txn}".encode()
        try:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(args.output, key=m.key(), value=tag, partition=m.partition())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
            _commit(producer)
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise
            producer.abort_transaction(30)
            _rewind(consumer)
            continue
        copied += len(msgs)
        print(json.dumps({"txn": txn, "copied": copied}), flush=True)


def _commit(producer: Producer) -> None:
    while True:
        try:
            producer.commit_transaction(30)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise


def _rewind(consumer: Consumer) -> None:
    """Back to the committed offsets: the aborted transaction's records are read again."""
    for tp in consumer.committed(consumer.assignment(), 30):
        if tp.offset >= 0:
            consumer.seek(tp)
        else:
            from confluent_kafka import OFFSET_BEGINNING, TopicPartition
            consumer.seek(TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
