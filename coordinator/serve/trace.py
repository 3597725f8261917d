"""A per-connection trace of requests read and answers written, behind a debug switch.

`GROUPCOORD_TRACE_CONNECTIONS=1` in groupcoord's environment logs, under the logger
`groupcoord.trace` (at WARNING, so that it shows whatever --log-level says), one line per request
read from a client connection (its API, version and correlation id) and one per answer written to
it (its correlation id and size), each naming the connection by the client's address and port:
enough to tell, for a client that says it waits for an answer, whether the request arrived and
whether and when its answer left (issue 41). Off, it costs one truth test per request.

Where: the requests `Server.dispatch` and the fast paths take, and every answer a client
connection writes (the server's own, and a sidecar's, forwarded answers included; a sidecar's
forwarded requests are not traced as read).
"""

from __future__ import annotations

import logging
import os
import struct
from typing import Final

from coordinator.serve.metrics import api_name

ENABLED: Final = os.environ.get("GROUPCOORD_TRACE_CONNECTIONS", "") not in ("", "0")

log = logging.getLogger("groupcoord.trace")
_CORRELATION = struct.Struct(">i")


def read(peer: str, api_key: int, version: int, correlation_id: int, client_id: str = "") -> None:
    log.warning(
        "trace %s read %s v%d correlation_id=%d client_id=%s",
        peer,
        api_name(api_key),
        version,
        correlation_id,
        client_id,
    )


def written(peer: str, data: bytes | bytearray | memoryview) -> None:
    """`data` starts with one or more whole response frames (size, correlation id, ...)."""
    view = memoryview(data)
    offset = 0
    while offset + 8 <= len(view):
        size = _CORRELATION.unpack_from(view, offset)[0]
        correlation_id = _CORRELATION.unpack_from(view, offset + 4)[0]
        log.warning("trace %s wrote correlation_id=%d bytes=%d", peer, correlation_id, size + 4)
        offset += size + 4
