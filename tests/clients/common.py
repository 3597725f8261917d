"""The contract every consumer driver follows, whatever client library it wraps.

A driver is a separate process (so a test can SIGKILL it, and so client libraries' threads and event
loops never share an interpreter). Arguments:

    --bootstrap HOST:PORT --group G --topic T --assignors range,roundrobin --client-id C
    [--instance-id I] [--session-timeout-ms N] [--heartbeat-interval-ms N]
    [--rebalance-timeout-ms N] [--metadata-max-age-ms N (-1: the library's default)]
    [--group-protocol classic|consumer]  consumer: KIP-848 (the server owns the session timeout
                        and heartbeat interval, so those flags are ignored; --assignors' first name,
                        if uniform or range, is the server assignor to ask for)
    [--members N]       a swarm: N consumers in this one process (a thread each), client ids
                        C-0 .. C-(N-1); every line then carries "member": its client id, and
                        "close" closes them all
    [--security JSON]   {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "username": ...,
                         "password": ..., "cafile": PEM, "certfile": PEM, "keyfile": PEM}: every
                        key optional (protocol PLAINTEXT when absent); each driver maps it onto its
                        client's own settings. Without --security nothing changes.

It prints one JSON object per line on stdout (the Java driver, tests/java/ConsumerDriver.java, too):

    {"event": "started"}
    {"event": "assigned", "partitions": [...all owned...], "added": [...], "generation": G|null,
     "member_id": "..."}
    {"event": "revoked", "partitions": [...]}
    {"event": "generation", "generation": G, "member_id": "..."}   when the group metadata changes
    {"event": "committed", "offset": N, "partitions": [...]}   after "commit N"
    {"event": "commit_failed", "offset": N, "error": "..."}
    {"event": "closed"}

A line "close" on stdin, or EOF, makes it close the consumer cleanly (LeaveGroup for a dynamic
member) and exit 0. A line "commit N" commits offset N for every partition the member owns
(OffsetCommit with its generation and member id), from the driver's poll loop. Assignor
names are Kafka's: range, roundrobin, sticky, cooperative-sticky.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # GROUPCOORD_DRIVER_LOG=DEBUG turns the client library's own logging on (to stderr, which the
    # tests keep in a per-member log file) for diagnosing a failure.
    level = os.environ.get("GROUPCOORD_DRIVER_LOG")
    if level:
        logging.basicConfig(level=level, stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--assignors", default="range")
    p.add_argument("--client-id", default="py-driver")
    p.add_argument("--instance-id", default=None)
    p.add_argument("--session-timeout-ms", type=int, default=10000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=500)
    p.add_argument("--rebalance-timeout-ms", type=int, default=30000)
    p.add_argument("--metadata-max-age-ms", type=int, default=5000)  # -1: the library's default
    p.add_argument("--security", type=json.loads, default=None)
    p.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    p.add_argument("--members", type=int, default=1)
    args = p.parse_args(argv)
    args.assignors = [a for a in args.assignors.split(",") if a]
    args.security = dict(args.security or {})
    return args


_lock = threading.Lock()


def emit(event: str, **fields: object) -> None:
    line = json.dumps({"event": event, **fields}, sort_keys=True)
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def sorted_ints(xs: Iterable[int]) -> list[int]:
    return sorted(set(xs))


def watch_stdin(on_close: Callable[[], None],
                commits: queue.SimpleQueue[int] | None = None) -> threading.Thread:
    """Call on_close once a "close" line or EOF arrives on stdin (from a daemon thread); with
    `commits`, the offset of each "commit N" line is put there for the poll loop to commit."""

    def run() -> None:
        try:
            for line in sys.stdin:
                words = line.split()
                if words == ["close"]:
                    break
                if commits is not None and len(words) == 2 and words[0] == "commit":
                    commits.put(int(words[1]))
        finally:
            on_close()

    t = threading.Thread(target=run, name="stdin-watch", daemon=True)
    t.start()
    return t


def pending(commits: queue.SimpleQueue[int]) -> list[int]:
    """The offsets of the "commit N" lines received since the last call."""
    out = []
    while True:
        try:
            out.append(commits.get_nowait())
        except queue.Empty:
            return out


def python_client_security(security: dict[str, Any]) -> dict[str, Any]:
    """--security as the arguments kafka-python and aiokafka share (their TLS differs: each
    driver adds it)."""
    out: dict[str, Any] = {"security_protocol": security.get("protocol", "PLAINTEXT")}
    if "mechanism" in security:
        out.update(sasl_mechanism=security["mechanism"],
                   sasl_plain_username=security.get("username"),
                   sasl_plain_password=security.get("password"))
    return out
