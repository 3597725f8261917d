"""A sidecar client connection's response order (coordinator.sidecar.proxy): one `Slot` per
request, filled by the upstream's answer (`Slot`; streamed through when first in line), by a
rewritten answer (`Rewritten`: Metadata, DescribeCluster, the topic admin APIs), or by the
server's own answer to a request answered here (`LocalReply`, which `Server.dispatch` takes for a
connection).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final, Protocol

from coordinator.sidecar.rewrite import RewriteError

log = logging.getLogger("groupcoord.sidecar")

STREAMING: Final = b"(streaming)"  # a Slot's data while its response streams through


class SlotOwner(Protocol):
    """What a slot needs of its client connection (coordinator.sidecar.proxy.SidecarConnection)."""

    client_host: str
    peer: str

    @property
    def closed(self) -> bool: ...

    def first_in_line(self, slot: Slot) -> bool: ...

    def complete(self, slot: Slot, data: bytes) -> None: ...

    def write(self, data: bytes) -> None: ...

    def upstream_failed(self) -> None: ...

    def drop(self, reason: str) -> None: ...

    def abort(self, reason: str, *, quiet: bool = False) -> None: ...

    def close(self) -> None: ...


class Slot:
    """One request's place in its connection's response order; called with the upstream's framed
    response (None: the upstream failed). A Sink too: when it is first in line, a large upstream
    response streams through it to the client (`begin`, `write`..., `end`)."""

    __slots__ = ("conn", "data")

    def __init__(self, conn: SlotOwner) -> None:
        self.conn = conn
        self.data: bytes | None = None

    def __call__(self, frame: bytes | None) -> None:
        if frame is None:
            self.conn.upstream_failed()
        else:
            self.conn.complete(self, frame)

    def begin(self) -> Slot | None:
        conn = self.conn
        if conn.closed or not conn.first_in_line(self):
            return None  # an earlier response is still to be sent: collect this one
        self.data = STREAMING
        return self

    def write(self, piece: bytes) -> None:
        self.conn.write(piece)

    def end(self) -> None:
        self.conn.complete(self, b"")


class Rewritten(Slot):
    __slots__ = ("rewrite",)

    def __init__(self, conn: SlotOwner, rewrite: Callable[[bytes], bytes]) -> None:
        super().__init__(conn)
        self.rewrite = rewrite

    def begin(self) -> Slot | None:
        return None  # rewritten answers are decoded whole

    def __call__(self, frame: bytes | None) -> None:
        if frame is None:
            self.conn.upstream_failed()
            return
        try:
            data = self.rewrite(frame)
        except RewriteError as exc:
            log.warning("cannot rewrite an upstream response: %s", exc)
            self.conn.drop("undecodable upstream response")
            return
        self.conn.complete(self, data)


class LocalReply:
    """Stands in for a `Connection` in `Server.dispatch`, for one locally answered request: its
    response fills the request's slot."""

    __slots__ = ("_conn", "_slot", "client_host", "fetch_timer", "peer")

    def __init__(self, conn: SlotOwner, slot: Slot) -> None:
        self._conn = conn
        self._slot = slot
        self.client_host = conn.client_host
        self.peer = conn.peer
        self.fetch_timer: asyncio.TimerHandle | None = None

    def send(self, data: bytes) -> None:
        self._conn.complete(self._slot, data)

    def abort(self, reason: str, *, quiet: bool = False) -> None:
        self._conn.abort(reason, quiet=quiet)

    def close(self) -> None:
        self._conn.close()

    @property
    def closed(self) -> bool:
        return self._conn.closed
