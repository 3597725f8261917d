"""confluent-kafka's ShareConsumer (KIP-932, librdkafka's preview) as a scripted share-group member.

The share drivers' contract (this one and tests/java/ShareDriver.java, the Java KafkaShareConsumer):

    --bootstrap HOST:PORT --group G --topic T --client-id C
    [--max-poll-records N] [--commit sync|async] [--work-ms N]

The member subscribes to T in share group G in EXPLICIT acknowledgement mode and polls in a loop.
Every record it polls it acknowledges itself, one by one, with ACCEPT unless a rule says otherwise,
then commits the batch's acknowledgements (commitSync, or commitAsync with --commit async) before
the next poll; --work-ms is the time it "processes" each non-empty batch before acknowledging it
(a busy member leaves the next records to the others, as a real worker would). Lines on stdin:

    rule P:O A1,A2,...   the record at partition P, offset O gets A1 on its first delivery to this
                         member's group, A2 on its second, ...; the last one repeats. An action is
                         accept, release or reject (the delivery count the broker reports picks it).
    hold                 the next non-empty poll's records are NOT acknowledged and the member stops
                         polling (it stays in the group: the client heartbeats on its own thread),
                         so the broker takes them back when their acquisition lock times out.
    close                close the consumer (pending acknowledgements are committed, the member
                         leaves the group) and exit 0; EOF does the same.

It prints one JSON object per line on stdout:

    {"event": "started"}
    {"event": "records", "records": [[P, O, delivery_count, action], ...]}   per non-empty poll
                         (in chunks of at most 500 records, so a line stays under 64 KiB);
                         action is what the member did: accept, release, reject, or hold
    {"event": "committed", "partitions": N, "errors": ["..."]}   after each commitSync (async: the
                         acknowledgement-commit callback's result)
    {"event": "holding"}                 the member stopped polling after a "hold"
    {"event": "told", "line": "..."}     a script line (rule, hold) is in force from now on
    {"event": "error", "where": "poll"|"commit"|"acknowledge", "error": "..."}
    {"event": "closed"}

Gaps of confluent-kafka 2.16's ShareConsumer met here (it logs that it is a preview): no assignment
callback and no member id (a test learns membership from ShareGroupDescribe, which its admin
client lacks too), max.poll.records is best effort, no RENEW acknowledgement (KIP-1222) and no
acquisition-lock timeout accessor, which the Java client has.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer

from tests.clients.common import emit

CHUNK = 500
ACTIONS = {"accept": AcknowledgeType.ACCEPT, "release": AcknowledgeType.RELEASE,
           "reject": AcknowledgeType.REJECT}


class Script:
    """What stdin asked for so far; read by the poll loop."""

    def __init__(self) -> None:
        self.rules: dict[tuple[int, int], list[str]] = {}
        self.hold = threading.Event()
        self.closing = threading.Event()
        self._lock = threading.Lock()

    def action(self, partition: int, offset: int, delivery_count: int) -> str:
        with self._lock:
            steps = self.rules.get((partition, offset))
        if not steps:
            return "accept"
        return steps[min(max(delivery_count, 1), len(steps)) - 1]

    def read(self) -> None:
        try:
            for line in sys.stdin:
                words = line.split()
                if words == ["close"]:
                    break
                if words == ["hold"]:
                    self.hold.set()
                elif len(words) == 3 and words[0] == "rule":
                    p, o = words[1].split(":")
                    steps = words[2].split(",")
                    assert all(s in ACTIONS for s in steps), words
                    with self._lock:
                        self.rules[(int(p), int(o))] = steps
                emit("told", line=line.strip())
        finally:
            self.closing.set()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--client-id", default="share-driver")
    p.add_argument("--max-poll-records", type=int, default=500)
    p.add_argument("--commit", choices=("sync", "async"), default="sync")
    p.add_argument("--work-ms", type=int, default=0)
    return p.parse_args(argv)


def main() -> int:
    args = parse_args()
    script = Script()
    consumer = ShareConsumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "share.acknowledgement.mode": "explicit",
        # Sent in ShareFetch (the broker acquires at most this many); librdkafka calls it best
        # effort: a poll may return more.
        "max.poll.records": args.max_poll_records,
        "retry.backoff.ms": 100,
        "reconnect.backoff.ms": 100,
        "log_level": 3,
    })

    def on_commit(offsets: dict[Any, set[int]], error: KafkaException | None) -> None:
        emit("committed", partitions=len(offsets), errors=[str(error)] if error else [])

    if args.commit == "async":
        consumer.set_acknowledgement_commit_callback(on_commit)
    consumer.subscribe([args.topic])
    threading.Thread(target=script.read, name="stdin", daemon=True).start()
    emit("started")
    while not script.closing.is_set():
        try:
            batch = consumer.poll(0.2)
        except KafkaException as exc:
            emit("error", where="poll", error=str(exc))
            continue
        records = [m for m in batch if m.error() is None]
        for m in batch:
            if m.error() is not None:
                emit("error", where="poll", error=str(m.error()))
        if not records:
            continue
        if script.hold.is_set():
            report([[m.partition(), m.offset(), m.delivery_count(), "hold"] for m in records])
            emit("holding")
            script.closing.wait()
            break
        if args.work_ms:
            time.sleep(args.work_ms / 1000)  # the batch's processing, under its locks
        done = []
        for m in records:
            action = script.action(m.partition(), m.offset(), m.delivery_count() or 1)
            try:
                consumer.acknowledge(m, ACTIONS[action])
            except (KafkaException, RuntimeError) as exc:
                emit("error", where="acknowledge", error=str(exc))
                continue
            done.append([m.partition(), m.offset(), m.delivery_count(), action])
        report(done)
        commit(consumer, args.commit)
    consumer.close()
    emit("closed")
    return 0


def report(records: list[list[Any]]) -> None:
    """One "records" event per CHUNK records: a reader's line stays short (asyncio's
    StreamReader refuses lines over 64 KiB), however many records a poll brought."""
    for i in range(0, len(records), CHUNK):
        emit("records", records=records[i:i + CHUNK])


def commit(consumer: ShareConsumer, how: str) -> None:
    try:
        if how == "async":
            consumer.commit_async()
            return
        result = consumer.commit_sync(15)
    except KafkaException as exc:
        emit("error", where="commit", error=str(exc))
        return
    emit("committed", partitions=len(result),
         errors=[f"{tp.topic}:{tp.partition}: {e}" for tp, e in result.items() if e is not None])


if __name__ == "__main__":
    sys.exit(main())
