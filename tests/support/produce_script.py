"""A scripted broker for the fleet's own Produce path (coordinator.sidecar.state_produce): a relay
in front of one real broker (tansu or Kafka) that reads the Kafka frames it carries.

- Metadata answers name the relay as the broker, so every connection a client makes after its
  bootstrap comes through the relay too.
- `produced` records every Produce request seen: [(partition, record count), ...] per request.
- `refuse` is a queue of error codes: each Produce request that arrives while it is not empty
  is NOT forwarded; the relay answers it itself with the next code for every partition in it
  (in order with the connection's other answers, as a broker does).
- `hold()` keeps the broker's Produce answers (and what follows them on their connection) until
  `release()`; `held` counts the answers kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from dataclasses import replace
from typing import Any

from coordinator.sidecar import rewrite
from tests.support.sidecar_util import HOST, Relay

PRODUCE = 0


def produce_partitions(frame: bytes) -> tuple[int, int, str, list[tuple[int, int]]]:
    """A framed Produce v3+ request (non-flexible, as state_produce sends v8): (correlation id,
    version, topic, [(partition, record count)]) of its one topic."""
    _, version, correlation_id, client_len = struct.unpack_from(">hhih", frame, 4)
    pos = 14 + max(client_len, 0)
    txn_len = struct.unpack_from(">h", frame, pos)[0]
    pos += 2 + max(txn_len, 0) + 2 + 4  # transactional id, acks, timeout
    (topics,) = struct.unpack_from(">i", frame, pos)
    assert topics == 1, topics
    (name_len,) = struct.unpack_from(">h", frame, pos + 4)
    topic = frame[pos + 6 : pos + 6 + name_len].decode()
    pos += 6 + name_len
    (count,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    out = []
    for _ in range(count):
        partition, size = struct.unpack_from(">ii", frame, pos)
        records = struct.unpack_from(">i", frame, pos + 8 + 57)[0]  # a v2 batch's record count
        out.append((partition, records))
        pos += 8 + size
    return correlation_id, version, topic, out


def produce_answer(correlation_id: int, topic: str, partitions: list[int], error: int) -> bytes:
    """A framed Produce v8 answer: `error` for every partition."""
    name = topic.encode()
    body = struct.pack(">ih", 1, len(name)) + name + struct.pack(">i", len(partitions))
    for p in partitions:
        # index, error, base offset, log append time, log start offset, record errors, message
        body += struct.pack(">ihqqqih", p, error, -1, -1, -1, 0, -1)
    body += struct.pack(">i", 0)  # throttle time
    return struct.pack(">ii", len(body) + 4, correlation_id) + body


class ProduceScript(Relay):
    def __init__(self, port: int, target: int) -> None:
        super().__init__(port, target)
        self.produced: list[list[tuple[int, int]]] = []
        self.refuse: list[int] = []
        self.held = 0
        self._released = asyncio.Event()
        self._released.set()

    def hold(self) -> None:
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if (upstream := await self._upstream(writer)) is None:
            return
        up_reader, up_writer = upstream
        # One entry per request, in order: a future of its answer's frame. The broker's answers
        # resolve the forwarded ones in order; the relay's own are resolved at once.
        answers: asyncio.Queue[tuple[int, int, asyncio.Future[bytes]]] = asyncio.Queue()
        forwarded: list[asyncio.Future[bytes]] = []
        loop = asyncio.get_running_loop()

        async def read(src: asyncio.StreamReader) -> bytes:
            size = await src.readexactly(4)
            return size + await src.readexactly(struct.unpack(">i", size)[0])

        async def requests() -> None:
            while True:
                frame = await read(reader)
                api_key, version = struct.unpack_from(">hh", frame, 4)
                future: asyncio.Future[bytes] = loop.create_future()
                await answers.put((api_key, version, future))
                if api_key == PRODUCE:
                    correlation_id, _, topic, parts = produce_partitions(frame)
                    self.produced.append(parts)
                    if self.refuse:
                        code = self.refuse.pop(0)
                        future.set_result(
                            produce_answer(correlation_id, topic, [p for p, _ in parts], code)
                        )
                        continue
                forwarded.append(future)
                up_writer.write(frame)
                await up_writer.drain()

        async def responses() -> None:
            while True:
                frame = await read(up_reader)
                forwarded.pop(0).set_result(frame)

        async def answer() -> None:
            while True:
                api_key, version, future = await answers.get()
                frame = await future
                if api_key == rewrite.METADATA:
                    frame = self._metadata(version, frame)
                elif api_key == PRODUCE and not self._released.is_set():
                    self.held += 1
                    await self._released.wait()
                writer.write(frame)
                await writer.drain()

        tasks = [loop.create_task(c) for c in (requests(), responses(), answer())]
        with contextlib.suppress(asyncio.CancelledError, OSError, asyncio.IncompleteReadError):
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        writer.transport.abort()
        up_writer.transport.abort()
        self._writers -= {writer, up_writer}

    def _metadata(self, version: int, frame: bytes) -> bytes:
        """Every broker is the relay."""
        correlation_id = rewrite.response_correlation_id(frame)
        response: Any = rewrite.decode_response(rewrite.METADATA, version, frame)
        brokers = tuple(replace(b, host=HOST, port=self.port) for b in response.brokers)
        edited = replace(response, brokers=brokers)
        return rewrite.encode_response(correlation_id, rewrite.METADATA, version, edited)
