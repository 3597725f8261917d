"""One shared link per fleet member for the group requests forwarded there (issue 37).

A member forwards a group request of a group another member owns to that owner's fleet listener
(coordinator.sidecar.forward). With a link of its own per client connection, every forwarded
request cost its own write and read system calls on both members (py-spy, issue 37: the writes
alone were a third of a busy member's samples). Here the requests of all client connections to one
owner share ONE link (`Multiplexer`, `MuxLink`):

- Correlation ids are the link's own: each request gets a fresh id on its way out (`MuxLink.send`)
  and its answer gets the client's id back before the client sees it. An id is never reused while
  a request that holds it is unanswered (a parked JoinGroup can wait minutes), so two requests on
  the link never share one. Its top bits are the client connection's tag (`tag_of`): the owner
  holds a request behind an earlier one waiting for a topic look-up (coordinator.sidecar.
  topic_lookup) only when both have the same tag, so one client's look-up never holds up the
  other clients' requests. (Tags repeat beyond TAGS client connections: those that share one
  share their holds, in order, which costs time, never order.)
- Everything sent in one loop turn leaves in one write (`MuxLink._flush`), and the owner answers
  everything ready in one turn with one write too (`Unordered`, used by
  coordinator.sidecar.connection).
- The link's first request is `hello_frame()`, an ApiVersions whose client id says the sender
  matches answers by correlation id: the owner's fleet connection then writes each answer as soon
  as it is ready instead of in request order (`Unordered`), so a parked JoinGroup, a commit
  waiting for the state topic, or a topic look-up of one client never holds up another client's
  heartbeat. An owner that does not know the hello answers in order, which the link matches just
  as well.
- An owner that cannot read a request answers it with a bare header (`refusal`) instead of closing
  the shared link: the forwarder then handles that request as one that got no answer (it decodes
  the request itself, and closes the client connection that sent an unreadable one).

Invariants:
- Request order per client connection: a client connection's requests reach the owner in the
  order it sent them (one link, written in order; the owner dispatches a connection's requests
  in the order they arrive); its answers go back through its own slot queue, in request order.
  ShareFetch and ShareAcknowledge keep a link per client connection (`PRIVATE`): the owner ends
  a share session when the client's connection to it closes (KIP-932, KAFKA-19015), and a long
  poll must not wait behind anything. A client connection switches between the two paths only
  when nothing is in flight on the other (coordinator.sidecar.forward `Router`).
- A link that fails, or that cannot be had, answers None to every request it holds: each is then
  answered NOT_COORDINATOR to its client, as a failed link of its own was (the client connection
  stays open; the next request connects again, after the member's reconnect backoff).
- The link is made as every fleet link is (`Broker.connect`: connect deadline, backoff, mutual
  TLS when the listener is secured, coordinator.sidecar.fleet_tls); nothing it carries is judged
  again by the owner, as before (the ACLs are checked by the member a client reached).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from coordinator.sidecar.rewrite import FrameStream
from coordinator.sidecar.upstream import MAX_RESPONSE_BYTES, Broker, Link, UpstreamUnavailable

if TYPE_CHECKING:
    from coordinator.sidecar.slots import Slot

log = logging.getLogger("groupcoord.sidecar.forward")

Address = tuple[str, int]
Reply = Callable[[bytes | None], None]  # a framed answer, or None: none will come

CLIENT_ID: Final = "groupcoord-fleet-mux"  # the hello's client id
API_VERSIONS: Final = 18
# Kept on a client connection's own link (module docstring).
PRIVATE: Final = frozenset({78, 79})  # ShareFetch, ShareAcknowledge
# A multiplexed fleet connection's unanswered requests, beyond which the owner stops reading it.
# Each client connection behind it is capped on its own (connection.MAX_PENDING_REQUESTS); this
# only bounds a member gone wrong. Parked JoinGroups of thousands of consumers stay well below.
MAX_PENDING: Final = 1 << 16
_ID: Final = struct.Struct(">i")
_HELLO_HEAD: Final = struct.Struct(">ihhih")  # size, api key, version, correlation id, id length
TAGS: Final = 1 << 15  # client connection tags: a correlation id's top 15 bits
_SEQ_BITS: Final = 16
_SEQ_MASK: Final = (1 << _SEQ_BITS) - 1
_REFUSAL_BYTES: Final = 8  # size and correlation id: no Kafka response has an empty body


def hello_frame(correlation_id: int) -> bytes:
    """ApiVersions v0 with client id CLIENT_ID: the link's first request."""
    client = CLIENT_ID.encode()
    size = _HELLO_HEAD.size - 4 + len(client)
    return _HELLO_HEAD.pack(size, API_VERSIONS, 0, correlation_id, len(client)) + client


def is_hello(frame: bytes) -> bool:
    """Whether a request `frame` (size prefix included) is `hello_frame`'s."""
    client = CLIENT_ID.encode()
    return (
        len(frame) >= _HELLO_HEAD.size + len(client)
        and frame[4:6] == b"\x00\x12"
        and frame[12:14] == len(client).to_bytes(2, "big")
        and frame[14 : 14 + len(client)] == client
    )


def refusal(frame: bytes) -> bytes:
    """The answer to a request `frame` the owner cannot read, on a multiplexed link: its
    correlation id and nothing else (no API's response is that short)."""
    return _ID.pack(4) + frame[8:12]


def tag_of(correlation_id: int) -> int:
    """The client connection tag in a shared link's correlation id."""
    return correlation_id >> _SEQ_BITS


def with_id(frame: bytes, offset: int, correlation_id: int) -> bytes:
    """`frame` with the correlation id at `offset` replaced."""
    return frame[:offset] + _ID.pack(correlation_id) + frame[offset + 4 :]


class MuxLink(Link):
    """A fleet link whose requests come from many client connections: its own correlation ids,
    answers matched by id (in any order), writes gathered per loop turn."""

    __slots__ = ("_flushing", "_next_id", "_outbox", "_pending")

    def __init__(self, broker: Broker) -> None:
        super().__init__(broker)
        # As a Link's, but a `refusal` (a correlation id alone) is a frame too.
        self._stream = FrameStream(self._on_frame, self._on_start, MAX_RESPONSE_BYTES, 4)
        self._pending: dict[int, tuple[int, Reply]] = {}  # link id -> (client's id, reply)
        self._next_id = 0
        self._outbox: list[bytes] = []
        self._flushing = False

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def _take_id(self, tag: int) -> int:
        """A fresh id with client connection tag `tag` (0 <= tag < TAGS); with the next tag when
        every id of this one is waiting (65,536 requests in flight: only if a tag's client
        connections far outnumber TAGS, and then they may lose their look-up holds' order)."""
        pending = self._pending
        seq = self._next_id
        while True:
            high = tag << _SEQ_BITS
            for _ in range(_SEQ_MASK + 1):
                seq = (seq + 1) & _SEQ_MASK
                link_id = high | seq
                if link_id not in pending:  # never one still waiting for its answer
                    self._next_id = seq
                    return link_id
            tag = (tag + 1) % TAGS

    def send(self, frame: bytes, correlation_id: int, callback: Reply | None, tag: int = 0) -> None:
        """Forward a client's request `frame` (its correlation id `correlation_id`, its client
        connection's `tag`) under an id of the link's own; `callback` gets the answer with the
        client's id, or None."""
        assert callback is not None  # forwarded group requests are always answered
        if self.closed or self.transport is None:
            callback(None)
            return
        link_id = self._take_id(tag)
        self._pending[link_id] = (correlation_id, callback)
        self._queue(with_id(frame, 8, link_id))

    def hello(self) -> None:
        link_id = self._take_id(0)
        self._pending[link_id] = (0, _ignore)
        self._queue(hello_frame(link_id))

    def _queue(self, data: bytes) -> None:
        self._outbox.append(data)
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = False
        outbox, self._outbox = self._outbox, []
        if outbox and not self.closed and self.transport is not None:
            self.transport.write(outbox[0] if len(outbox) == 1 else b"".join(outbox))

    def _on_start(self, data: bytes, pos: int, total: int) -> None:
        return None  # answers are collected whole (they go to clients in their own order)

    def _on_frame(self, frame: bytes) -> None:
        if self.closed:
            return
        link_id = _ID.unpack_from(frame, 4)[0]
        entry = self._pending.pop(link_id, None)
        if entry is None:
            self._protocol_error(f"an answer (id {link_id}) nobody asked for")
            return
        correlation_id, reply = entry
        if len(frame) == _REFUSAL_BYTES:  # `refusal`: the owner could not read it
            reply(None)
            return
        reply(with_id(frame, 4, correlation_id))

    def _fail(self) -> None:
        if self.closed:
            return
        pending, self._pending = self._pending, {}
        self._outbox = []
        super()._fail()
        for _, reply in pending.values():  # in the order they were sent
            reply(None)


def _ignore(_: bytes | None) -> None:
    pass


class MemberLinks:
    """Links to fleet members by listener address, each made at the first request for it (the
    requests that come meanwhile are queued), forgotten when it fails or closes (the next request
    makes it again); a `LinkOwner`. A request is `link.send`'s arguments, its `Reply` third:
    `reply(None)` when no link can be had. `Multiplexer` keeps the sidecar's shared links,
    coordinator.sidecar.forward's `Router` a client connection's private ones."""

    def __init__(
        self,
        member: Callable[[Address], Broker],
        spawn: Callable[[Any], object],
        make: Callable[[Broker], Link] = Link,
    ) -> None:
        self._member = member
        self._spawn = spawn
        self._make = make  # the kind of link (Broker.connect)
        self._links: dict[Address, Link] = {}
        self._queued: dict[Address, list[tuple[Any, ...]]] = {}
        self._closed = False

    def _via(self, address: Address, *request: Any) -> None:
        """Send `request` on the link to `address`, or queue it until that link is made."""
        link = self._links.get(address)
        if link is not None:
            link.send(*request)
            return
        queued = self._queued.get(address)
        if queued is None:
            if self._closed:
                request[2](None)
                return
            queued = self._queued[address] = []
            self._spawn(self._connect(address))
        queued.append(request)

    async def _connect(self, address: Address) -> None:
        member = self._member(address)
        try:
            link = await member.connect(self._make)
        except UpstreamUnavailable as exc:
            log.debug("cannot forward to %s: %s", member.label, exc)
            for request in self._queued.pop(address, []):
                request[2](None)
            return
        queued = self._queued.pop(address, [])
        if self._closed:
            link.close()
            for request in queued:
                request[2](None)
            return
        link.owner = self
        self._links[address] = link
        self._linked(link)
        for request in queued:
            link.send(*request)

    def _linked(self, link: Link) -> None:
        """A new link, before the requests queued for it."""

    # LinkOwner: forwarded group requests are small, and each client connection's are capped
    # (connection.MAX_PENDING_REQUESTS), so a slow member does not pause its senders.
    def upstream_writable(self, writable: bool) -> None:
        pass

    def upstream_lost(self, link: Link) -> None:
        for address, held in list(self._links.items()):
            if held is link:
                del self._links[address]

    def close(self) -> None:
        self._closed = True
        links, self._links = self._links, {}
        for link in links.values():
            link.close()


class Multiplexer(MemberLinks):
    """Sidecar-wide: the shared link to each fleet member (made at the first request for it,
    made again at the next one after it failed)."""

    def __init__(
        self,
        member: Callable[[Address], Broker],
        spawn: Callable[[Any], object],
    ) -> None:
        super().__init__(member, spawn, MuxLink)
        self._tags = 0

    def tag(self) -> int:
        """A client connection's tag (module docstring)."""
        self._tags += 1
        return self._tags % TAGS

    def send(
        self, address: Address, frame: bytes, correlation_id: int, reply: Reply, tag: int = 0
    ) -> None:
        self._via(address, frame, correlation_id, reply, tag)

    def _linked(self, link: Link) -> None:
        assert isinstance(link, MuxLink)
        link.hello()


class Unordered(deque["Slot"]):
    """A multiplexed fleet connection's response queue, on the owner: answers leave as soon as
    they are ready (the forwarder matches them by correlation id), so only how many are
    unanswered is kept. It stands in for the connection's `deque` of slots: `append` counts,
    `done` uncounts, `len` is that count."""

    def __init__(self) -> None:
        super().__init__()
        self.unanswered = 0

    def append(self, slot: Slot) -> None:
        self.unanswered += 1

    def done(self) -> None:
        self.unanswered -= 1

    def clear(self) -> None:
        self.unanswered = 0

    def __len__(self) -> int:
        return self.unanswered

    def __bool__(self) -> bool:
        return self.unanswered > 0
