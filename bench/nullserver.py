"""A null Kafka responder for calibrating the load generator: `python -m bench.nullserver PORT`.

It answers every request frame with the request's correlation id and a body of zero bytes, which
the generator decodes as "error 0" for ApiVersions v0 and Heartbeat v3. Running the heartbeat
workload against it on the server's core shows the ceiling of the generator (and of the loopback
path) on this machine: a server cannot be measured faster than this. It stops after --seconds.
"""

from __future__ import annotations

import argparse
import asyncio

import uvloop

ZEROS = bytes(64)


class Responder(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        out = []
        while len(buf) >= 4:
            size = int.from_bytes(buf[:4])
            if len(buf) < 4 + size:
                break
            # Six zero bytes: ApiVersions v0 (error, no keys) and Heartbeat v3 (throttle, error).
            out.append((4 + 6).to_bytes(4) + buf[8:12] + ZEROS[:6])
            buf = buf[4 + size :]
        self.buf = buf
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def serve(port: int, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Responder, "127.0.0.1", port, backlog=4096)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    try:
        await asyncio.sleep(seconds)
    finally:
        server.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--seconds", type=float, default=600)
    args = p.parse_args()
    uvloop.run(serve(args.port, args.seconds))


if __name__ == "__main__":
    main()
