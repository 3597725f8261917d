"""The per-connection trace (coordinator.serve.trace, GROUPCOORD_TRACE_CONNECTIONS=1): every
request read and every answer written, by correlation id, so that "the client waits for an
answer" can be told apart from "groupcoord never sent it" (issue 41)."""

from __future__ import annotations

import logging
import re
import struct
from typing import Any

import pytest

from coordinator.serve import trace
from tests.support import realclients as rc
from tests.support.sidecar_util import RawClient, kio


def test_written_names_every_frame_of_a_write(caplog: pytest.LogCaptureFixture) -> None:
    frames = b"".join(struct.pack(">ii", 4 + len(body), cid) + body
                      for cid, body in ((7, b"abc"), (8, b""), (9, b"\x00" * 100)))
    with caplog.at_level(logging.WARNING, "groupcoord.trace"):
        trace.written("127.0.0.1:5", frames)
    assert [r.getMessage() for r in caplog.records] == [
        "trace 127.0.0.1:5 wrote correlation_id=7 bytes=11",
        "trace 127.0.0.1:5 wrote correlation_id=8 bytes=8",
        "trace 127.0.0.1:5 wrote correlation_id=9 bytes=108",
    ]


async def test_a_traced_server_logs_each_request_and_its_answer(
        server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROUPCOORD_TRACE_CONNECTIONS", "1")
    broker = server(topics={"t": 1})
    client = await RawClient.connect(broker.port)
    try:
        await client.call(kio(18, 3, "ApiVersionsRequest", client_software_name="trace-test",
                              client_software_version="1"))
        # A Heartbeat takes the fast path: traced there too (UNKNOWN_MEMBER_ID, no group).
        await client.call(kio(12, 4, "HeartbeatRequest", group_id="g", generation_id=1,
                              member_id="m", group_instance_id=None))
    finally:
        client.close()

    def traced() -> list[str]:
        return re.findall(r"trace \S+ (read \S+ v\d+ correlation_id=\d+|wrote correlation_id=\d+)",
                          broker.log_path.read_text())

    expected = ["read ApiVersions v3 correlation_id=1", "wrote correlation_id=1",
                "read Heartbeat v4 correlation_id=2", "wrote correlation_id=2"]
    await rc.wait_until(lambda: traced() == expected, 10, "the trace of both requests",
                        explain=lambda: str(traced()))
