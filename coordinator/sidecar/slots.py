"""A sidecar client connection's response order (coordinator.sidecar.proxy): one `Slot` per
request, filled by the upstream's answer (`Slot`; streamed through when first in line), by a
rewritten answer (`Rewritten`: Metadata, DescribeCluster, the topic admin APIs), or by the
server's own answer to a request answered here (`LocalReply`, which `Server.dispatch` and the
fleet's router take for a connection).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final, Protocol

from coordinator.sidecar.rewrite import RewriteError
from protocol import codec

log = logging.getLogger("groupcoord.sidecar")

STREAMING: Final = b"(streaming)"  # a Slot's data while its response streams through


class SlotOwner(Protocol):
    """What a slot needs of its client connection (sidecar.connection.SidecarConnection)."""

    client_host: str
    peer: str
    # A member's shared fleet link (coordinator.sidecar.fleet_mux): answers leave when ready.
    multiplexed: bool
    # Its security state (coordinator.serve.secure): who it is, and its SASL session.
    principal: str
    authenticated: bool
    sasl_exchange: Any
    session_expires: float | None

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
    """Stands in for a `Connection` in `Server.dispatch` or a server route, for one request
    answered here: its response goes to `answer` (the request's slot, or the fleet router's
    sink). The client connection's security state shows through it, so the gate
    (coordinator.serve.secure) judges and authenticates the client connection itself; an answer
    the gate amends (a filtered ListGroups) is amended on its way out."""

    __slots__ = ("_amend", "_answer", "_conn", "client_host", "fetch_timer", "peer")

    def __init__(self, conn: SlotOwner, answer: Callable[[bytes], None]) -> None:
        self._conn = conn
        self._answer = answer
        self._amend: tuple[Any, Callable[[Any], Any]] | None = None
        self.client_host = conn.client_host
        self.peer = conn.peer
        self.fetch_timer: asyncio.TimerHandle | None = None

    def send(self, data: bytes) -> None:
        pending = self._amend
        if pending is not None:
            self._amend = None
            header, amend = pending
            data = codec.encode_response(header, amend(codec.decode_response(header, data)))
        self._answer(data)

    def amend_next(self, header: Any, amend: Callable[[Any], Any]) -> None:
        self._amend = (header, amend)

    def abort(self, reason: str, *, quiet: bool = False) -> None:
        self._conn.abort(reason, quiet=quiet)

    def close(self) -> None:
        self._conn.close()

    @property
    def closed(self) -> bool:
        return self._conn.closed

    # The client connection's security state (coordinator.serve.secure.Gate reads and sets it).
    @property
    def principal(self) -> str:
        return self._conn.principal

    @principal.setter
    def principal(self, value: str) -> None:
        self._conn.principal = value

    @property
    def authenticated(self) -> bool:
        return self._conn.authenticated

    @authenticated.setter
    def authenticated(self, value: bool) -> None:
        self._conn.authenticated = value

    @property
    def sasl_exchange(self) -> Any:
        return self._conn.sasl_exchange

    @sasl_exchange.setter
    def sasl_exchange(self, value: Any) -> None:
        self._conn.sasl_exchange = value

    @property
    def session_expires(self) -> float | None:
        return self._conn.session_expires

    @session_expires.setter
    def session_expires(self, value: float | None) -> None:
        self._conn.session_expires = value
