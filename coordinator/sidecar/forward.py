"""Group API routing in a sidecar fleet: answer here, forward to the owner, or refuse.

Several sidecars act as one coordinator: each group's state lives in a state partition owned by
exactly one member (coordinator.sidecar.placement). A client may send a group request to any
member; the member it reached routes it by `Locator.locate(group_id)`:

- LOCAL: answered by this member's core, as a single sidecar does.
- LOADING / UNKNOWN: COORDINATOR_LOAD_IN_PROGRESS / NOT_COORDINATOR, placed where Kafka puts a
  group error in that API and version (`adapters.error_response`; per group for batched APIs).
  Clients retry on both, the second after finding the coordinator again, as with Kafka.
- REMOTE: the client's frame to the owner's fleet listener, its answer back to the client,
  unchanged but for the correlation id of the shared link (coordinator.sidecar.fleet_mux).
  A request of one group whose body opens with the group id (Heartbeat, OffsetCommit,
  Join/Sync/LeaveGroup, ConsumerGroupHeartbeat) is routed from its header and group id alone
  when no ACLs are on (`_fast`): the owner decodes the body, and a body it cannot read
  closes the client's connection once the owner has refused it (`fleet_mux.refusal`). A
  Heartbeat of a group this member owns (from a client, or forwarded by a member) is answered
  by the server's fast path, as a standalone server's (`_answer_fast`).

Invariants:
- Per owner address, one link shared by every client connection (coordinator.sidecar.fleet_mux:
  its own correlation ids, one write per loop turn); ShareFetch/ShareAcknowledge on a link of the
  client connection's own, closed with it. A client connection's requests to one owner stay in
  order: it moves to the other path only once nothing is in flight on the one it used (`_Order`).
  The client connection's own slot queue keeps its responses in request order, whichever member
  answered them.
- An owner that cannot be reached, a link that fails, or an answer that cannot be read: that
  request is answered NOT_COORDINATOR. The client connection stays open (unlike an upstream
  failure): only the group's coordinator is in question, not the broker the client talks to.
- A request that arrived from another member (a `from_peer` connection) is never forwarded again:
  LOCAL is answered, LOADING gets LOAD_IN_PROGRESS, anything else NOT_COORDINATOR. No loops.
- Batched APIs (DescribeGroups, DeleteGroups, OffsetFetch v8+, ConsumerGroupDescribe) whose
  groups live in different places are split into one sub-request per destination (`split`) and
  the parts' answers merged back into one response in the request's group order (`merge`). A
  request whose groups all live in one place is routed whole, frame unchanged.
- ListGroups, from a client: the union of this member's answer and every peer's
  (`merge_list_groups`); a peer that fails or does not answer within `list_groups_timeout_s` is
  left out, with one WARNING until it answers again. From a peer: this member's answer only.
- `split`, `merge`, `merge_list_groups` and `group_ids` are pure; the rest is the asyncio shell.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Final, assert_never, cast

from kio.schema.errors import ErrorCode

from coordinator.security.client import PLAINTEXT, ClientSecurity
from coordinator.serve import adapters, group_config_adapters
from coordinator.serve.server import Connection, Server
from coordinator.sidecar import fleet_mux
from coordinator.sidecar.placement import LOCAL, UNKNOWN, Locator, Placement, Where
from coordinator.sidecar.slots import LocalReply, SlotOwner
from coordinator.sidecar.upstream import Broker
from protocol import apis, codec, fastpath
from protocol.codec import RequestHeader

log = logging.getLogger("groupcoord.sidecar.forward")

Address = tuple[str, int]
Answer = Callable[[bytes], None]  # the framed response to the client's request
Reply = Callable[[bytes | None], None]  # a peer's framed response, or None: none will come
Sink = Callable[[object | None], None]  # a part's decoded response, or None: left out

# Below a client's request timeout (Kafka's request.timeout.ms: 30 s, aiokafka's 40 s), so a
# silent member costs a slow listing, not a failed one.
LIST_GROUPS_PEER_TIMEOUT_S: Final = 5.0

_NOT_COORDINATOR: Final = ErrorCode.not_coordinator
_LOADING: Final = ErrorCode.coordinator_load_in_progress
# Batched APIs: (the request's group field, the response's entry field); entries carry group_id.
_BATCHED: Final = {
    apis.DESCRIBE_GROUPS: ("groups", "groups"),
    apis.DELETE_GROUPS: ("groups_names", "results"),
    apis.OFFSET_FETCH: ("groups", "groups"),  # v8+ (KIP-709); one group_id before
    apis.CONSUMER_GROUP_DESCRIBE: ("group_ids", "groups"),  # KIP-848 (issue 23)
    apis.SHARE_GROUP_DESCRIBE: ("group_ids", "groups"),  # KIP-932
    apis.DESCRIBE_SHARE_GROUP_OFFSETS: ("groups", "groups"),
}
_FIRST_BATCHED_OFFSET_FETCH: Final = 8


# --------------------------------------------------------------------------------------------------
# Pure: the groups a request names; splitting a batched request and merging its answers


def _batch_fields(header: RequestHeader) -> tuple[str, str] | None:
    if header.api_key == apis.OFFSET_FETCH and header.api_version < _FIRST_BATCHED_OFFSET_FETCH:
        return None
    return _BATCHED.get(header.api_key)


def _group_of(item: Any) -> str:
    return item if isinstance(item, str) else cast(str, item.group_id)


def group_ids(header: RequestHeader, request: Any) -> list[str]:
    """The group ids `request` names, in its order ([] for ListGroups, which names none)."""
    fields = _batch_fields(header)
    if fields is not None:
        return [_group_of(item) for item in getattr(request, fields[0])]
    if header.api_key == apis.LIST_GROUPS:
        return []
    if header.api_key in apis.GROUP_CONFIG_APIS:
        # The GROUP resources' names. Not batched: a request naming groups of several owners
        # goes whole to the first one's owner (a limitation; docs/share-groups-admin.md).
        return group_config_adapters.group_ids(request)
    return [request.group_id]


@dataclass(frozen=True, slots=True)
class Part:
    """The groups of a request that `where` answers, as a request of the same API and version."""

    where: Where
    request: object


def split(header: RequestHeader, request: Any, where: Callable[[str], Where]) -> list[Part]:
    """One part per destination, in the order destinations first appear in the request; groups
    keep their order within a part. A request whose groups share one destination (or that names
    none: LOCAL) is one part holding `request` itself."""
    fields = _batch_fields(header)
    if fields is None:
        ids = group_ids(header, request)
        return [Part(where(ids[0]) if ids else LOCAL, request)]
    items = getattr(request, fields[0])
    by_where: dict[Where, list[Any]] = {}
    for item in items:
        by_where.setdefault(where(_group_of(item)), []).append(item)
    if len(by_where) <= 1:
        return [Part(next(iter(by_where), LOCAL), request)]
    return [
        Part(w, dataclasses.replace(request, **{fields[0]: tuple(part)}))
        for w, part in by_where.items()
    ]


def _loading(header: RequestHeader) -> ErrorCode:
    """What a group that is loading answers. A classic Heartbeat gets NONE, as Kafka's
    GroupCoordinatorService.heartbeat answers it ("the group is still loading, so blindly
    respond"): aiokafka and
    kafka-python treat COORDINATOR_LOAD_IN_PROGRESS on a Heartbeat as fatal, and the member's
    session is safe while its group is loaded again."""
    return ErrorCode.none if header.api_key == apis.HEARTBEAT else _LOADING


def _throttle(responses: Sequence[Any], base: Any) -> dict[str, Any]:
    if not hasattr(base, "throttle_time"):
        return {}
    return {"throttle_time": max((r.throttle_time for r in responses), default=base.throttle_time)}


def merge(header: RequestHeader, request: Any, responses: Sequence[Any]) -> object:
    """One response to the batched `request` from its parts' responses (in any order): an entry
    per requested group in the request's order; a group no part answered gets NOT_COORDINATOR
    (its owner is in doubt; the client looks it up again). The throttle is the longest."""
    fields = _batch_fields(header)
    if fields is None:
        raise ValueError(f"api {header.api_key} v{header.api_version} is not batched")
    request_field, response_field = fields
    answered: dict[str, Any] = {}
    for response in responses:
        for entry in getattr(response, response_field):
            answered.setdefault(entry.group_id, entry)
    entries = []
    for item in getattr(request, request_field):
        entry = answered.get(_group_of(item))
        if entry is None:
            lone = dataclasses.replace(request, **{request_field: (item,)})
            error = adapters.error_response(header, lone, _NOT_COORDINATOR)
            entry = getattr(error, response_field)[0]
        entries.append(entry)
    empty = dataclasses.replace(request, **{request_field: ()})
    base: Any = adapters.error_response(header, empty, ErrorCode.none)
    return dataclasses.replace(
        base, **{response_field: tuple(entries)}, **_throttle(responses, base)
    )


def merge_list_groups(responses: Sequence[Any]) -> object:
    """ListGroups answers of several members as one: the first answer (this member's) with every
    group listed by any of them, once; the first error any of them gave; the longest throttle."""
    first = responses[0]
    seen: set[str] = set()
    groups = []
    error = ErrorCode.none
    for response in responses:
        if error == ErrorCode.none:
            error = response.error_code
        for group in response.groups:
            if group.group_id not in seen:
                seen.add(group.group_id)
                groups.append(group)
    return dataclasses.replace(
        first, error_code=error, groups=tuple(groups), **_throttle(responses, first)
    )


# --------------------------------------------------------------------------------------------------
# The shell


class _Member(Broker):
    """A fleet member's listener, reached as an upstream broker is (connect deadline, backoff)."""

    @property
    def label(self) -> str:
        return f"fleet member {self.host}:{self.port}"


class PeerLinks:
    """Sidecar-wide: the fleet members requests are forwarded to, one `Broker` per listener address
    (its reconnect backoff, shared by every client connection), and which members ListGroups
    currently leaves out."""

    def __init__(self, spawn: Callable[[Coroutine[Any, Any, None]], object]) -> None:
        self.spawn = spawn
        self.list_groups_timeout_s = LIST_GROUPS_PEER_TIMEOUT_S
        # Mutual TLS to the members' fleet listeners when the client listener is secured
        # (coordinator.sidecar.fleet_tls sets it before the first link); plaintext otherwise.
        self.security: ClientSecurity = PLAINTEXT
        self._members: dict[Address, Broker] = {}
        self._silent: set[Address] = set()
        self.forwarded = 0  # client requests sent to another member (a metric)
        self.shared = fleet_mux.Multiplexer(self.member, spawn)  # one link per member

    def member(self, address: Address) -> Broker:
        member = self._members.get(address)
        if member is None:
            member = self._members[address] = _Member(*address, security=self.security)
        return member

    def left_out(self, address: Address, reason: str) -> None:
        if address not in self._silent:
            self._silent.add(address)
            log.warning("ListGroups leaves out fleet member %s:%d: %s", *address, reason)

    def answered(self, address: Address) -> None:
        if address in self._silent:
            self._silent.discard(address)
            log.info("fleet member %s:%d answers ListGroups again", *address)

    def close(self) -> None:
        self.shared.close()
        for member in self._members.values():
            member.close()


class _Gather:
    """The parts of one request: once each has answered (or been left out), `finish` gets their
    responses in part order. A part's later answers (after a timeout) are ignored."""

    __slots__ = ("_finish", "_missing", "_responses")

    _PENDING: Final = object()

    def __init__(self, count: int, finish: Callable[[list[Any]], None]) -> None:
        self._finish = finish
        self._missing = count
        self._responses: list[Any] = [self._PENDING] * count

    def sink(self, index: int) -> Sink:
        def done(response: object | None) -> None:
            if self._responses[index] is not self._PENDING:
                return
            self._responses[index] = response
            self._missing -= 1
            if self._missing == 0:
                self._finish(self._responses)

        return done


class _Order:
    """A client connection's requests to one owner: which path (shared link or its own) has
    `count` of them in flight, and those `held` until that path has none left."""

    __slots__ = ("count", "held", "private")

    def __init__(self) -> None:
        self.private = False
        self.count = 0
        self.held: deque[tuple[bool, bytes, int, Reply]] = deque()


class Router(fleet_mux.MemberLinks):
    """One client connection's group requests in a fleet, and its links to the other members."""

    def __init__(
        self, client: SlotOwner, server: Server, peers: PeerLinks, from_peer: bool
    ) -> None:
        self._client = client
        self._server = server
        self._peers = peers
        self._from_peer = from_peer
        super().__init__(peers.member, peers.spawn)  # its private links (fleet_mux.PRIVATE)
        self._orders: dict[Address, _Order] = {}
        self._tag = peers.shared.tag()  # on the shared links (coordinator.sidecar.fleet_mux)

    def route(self, frame: bytes, locator: Locator, answer: Answer) -> None:
        """Route one group request `frame` (size prefix included); `answer` gets its response."""
        server = self._server
        t0 = server.stats.clock() if server.stats is not None else 0
        gate = server.gate
        if (gate is None or self._from_peer) and self._fast(frame, locator, t0, answer):
            return
        try:
            header, request = codec.decode_request(frame[4:])
        except codec.DecodeError as exc:
            if isinstance(exc, codec.UnsupportedVersion):
                reason = f"unsupported API {exc.header.api_key} v{exc.header.api_version}"
            else:
                reason = f"malformed request: {exc}"
            if self._client.multiplexed:  # a shared link: refused alone, the link kept
                log.debug("refused a forwarded request: %s", reason)
                answer(fleet_mux.refusal(frame))
            else:
                self._client.abort(reason)
            return
        if gate is not None and not self._from_peer:
            # Judged here, by the member the client is connected to (its principal is known
            # only here); a member trusts what other members forward, and with a secured
            # listener only members get through its fleet listener (coordinator.sidecar.fleet_tls).
            judged = LocalReply(self._client, answer)
            allowed = gate(judged, header, request, t0)
            if allowed is None:
                return  # refused (answered through `judged`), or the connection closed
            if allowed is not request:  # without what the caller may not touch
                request = allowed
                frame = codec.encode_request(header, request)
            answer = judged.send  # amends the answer when the gate said so
        if header.api_key == apis.LIST_GROUPS:
            self._list_groups(frame, header, request, t0, locator, answer)
            return

        def where(group_id: str) -> Where:
            found = locator.locate(group_id)
            if found.placement is Placement.REMOTE and (self._from_peer or found.address is None):
                return UNKNOWN  # never forwarded twice
            return found

        parts = split(header, request, where)
        if len(parts) == 1:
            self._whole(parts[0].where, frame, header, request, t0, answer)
            return

        def finish(responses: list[Any]) -> None:
            answered = [r for r in responses if r is not None]  # merge fills in the rest
            answer(codec.encode_response(header, merge(header, request, answered)))

        gather = _Gather(len(parts), finish)
        for index, part in enumerate(parts):
            self._part(part, header, t0, gather.sink(index))

    def _fast(self, frame: bytes, locator: Locator, t0: int, answer: Answer) -> bool:
        """A request of one group found from its header and group id alone
        (`fastpath.group_first`), without a header object or decoding the body: sent as it came
        when another member owns the group (the owner decodes it); when this member owns it, a
        Heartbeat is answered as a standalone server's fast path answers it (`_answer_fast`).
        False: anything else, left to `route`'s general path. Only where no ACLs are judged here
        (no gate, or a request from a member)."""
        found = fastpath.group_first(frame)
        if found is None:
            return False  # the general path answers or closes
        api_key, correlation_id, group_id = found
        where = locator.locate(group_id)
        if where.placement is Placement.LOCAL:
            return self._answer_fast(api_key, frame, answer)
        if where.placement is not Placement.REMOTE or where.address is None or self._from_peer:
            return False

        def relay(response: bytes | None) -> None:
            if response is not None:
                answer(response)
                return
            # No answer (rare): the body decoded now, for the error's fields; one the owner could
            # not read closes the client's connection, as `route`'s decode would have at once.
            try:
                header, request = codec.decode_request(frame[4:])
            except codec.DecodeError as exc:
                self._client.abort(f"malformed request: {exc}")
                return
            context = adapters.error_context(header, request)
            answer(self._error(header, context, _NOT_COORDINATOR, t0))

        self._send(where.address, frame, correlation_id, relay)
        return True

    def _answer_fast(self, api_key: int, frame: bytes, answer: Answer) -> bool:
        """A Heartbeat of a group this member owns, answered as the server's own listener's fast
        path answers it (protocol.fastpath); False when the fast parse is unsure."""
        if api_key != apis.HEARTBEAT:
            return False
        server = self._server
        fields = fastpath.parse_heartbeat(frame, server.options.max_frame_bytes)
        data = None if fields is None else server.heartbeat_frame(self._client, fields)
        if data is None:
            return False
        answer(data)
        return True

    def _whole(
        self,
        where: Where,
        frame: bytes,
        header: RequestHeader,
        request: Any,
        t0: int,
        answer: Answer,
    ) -> None:
        match where.placement:
            case Placement.LOCAL:
                self._local(header, request, t0, answer)
            case Placement.LOADING:
                answer(self._error(header, request, _loading(header), t0))
            case Placement.UNKNOWN:
                answer(self._error(header, request, _NOT_COORDINATOR, t0))
            case Placement.REMOTE:
                assert where.address is not None  # `route` made it UNKNOWN otherwise
                context = adapters.error_context(header, request)  # not the whole request

                def relay(response: bytes | None) -> None:
                    if response is None:
                        answer(self._error(header, context, _NOT_COORDINATOR, t0))
                    else:
                        answer(response)

                self._send(where.address, frame, header.correlation_id, relay)
            case _:
                assert_never(where.placement)

    def _part(self, part: Part, header: RequestHeader, t0: int, sink: Sink) -> None:
        request: Any = part.request
        match part.where.placement:
            case Placement.LOCAL:
                self._local(header, request, t0, lambda data: sink(self._read(header, data)))
            case Placement.LOADING:
                sink(adapters.error_response(header, request, _LOADING))
            case Placement.UNKNOWN:
                sink(adapters.error_response(header, request, _NOT_COORDINATOR))
            case Placement.REMOTE:  # no answer: `merge` makes it NOT_COORDINATOR
                assert part.where.address is not None
                frame = codec.encode_request(header, request)

                def relay(response: bytes | None) -> None:
                    sink(self._read(header, response))

                self._send(part.where.address, frame, header.correlation_id, relay)
            case _:
                assert_never(part.where.placement)

    def _list_groups(
        self,
        frame: bytes,
        header: RequestHeader,
        request: Any,
        t0: int,
        locator: Locator,
        answer: Answer,
    ) -> None:
        peers = [] if self._from_peer else locator.peers()
        if not peers:
            self._local(header, request, t0, answer)
            return

        def finish(responses: list[Any]) -> None:
            answered = [r for r in responses if r is not None]
            if not answered:  # not even this member's: a bug, answered as a retriable one
                answered = [adapters.error_response(header, request, _NOT_COORDINATOR)]
            answer(codec.encode_response(header, merge_list_groups(answered)))

        gather = _Gather(1 + len(peers), finish)
        local = gather.sink(0)
        self._local(header, request, t0, lambda data: local(self._read(header, data)))
        loop = asyncio.get_running_loop()
        for index, address in enumerate(peers, 1):
            self._ask(loop, address, frame, header, gather.sink(index))

    def _ask(
        self,
        loop: asyncio.AbstractEventLoop,
        address: Address,
        frame: bytes,
        header: RequestHeader,
        sink: Sink,
    ) -> None:
        """ListGroups to one peer: its answer, or None when it fails or is late."""
        peers = self._peers

        def late() -> None:
            peers.left_out(address, f"no answer in {peers.list_groups_timeout_s} s")
            sink(None)

        timer = loop.call_later(peers.list_groups_timeout_s, late)

        def reply(response: bytes | None) -> None:
            timer.cancel()
            decoded = self._read(header, response)
            if decoded is None:
                peers.left_out(address, "unreachable or broken answer")
            else:
                peers.answered(address)
            sink(decoded)

        self._send(address, frame, header.correlation_id, reply)

    # -- answers ---------------------------------------------------------------------------------

    def _local(self, header: RequestHeader, request: Any, t0: int, answer: Answer) -> None:
        reply = cast(Connection, LocalReply(self._client, answer))  # routes use send/abort/closed
        self._server.routes[header.api_key](reply, header, request, t0)

    def _error(self, header: RequestHeader, context: object, error: ErrorCode, t0: int) -> bytes:
        stats = self._server.stats
        if stats is not None:
            stats.done(header.api_key, error, t0)
        return codec.encode_response(header, adapters.error_response(header, context, error))

    def _read(self, header: RequestHeader, frame: bytes | None) -> object | None:
        """A part's framed answer decoded; None when there is none or it cannot be read."""
        if frame is None:
            return None
        try:
            return codec.decode_response(header, frame)
        except codec.MalformedResponse as exc:
            log.warning("unreadable answer to api %d from a fleet member: %s", header.api_key, exc)
            return None

    # -- links to the other members --------------------------------------------------------------

    def forward(self, address: Address, frame: bytes, correlation_id: int, reply: Reply) -> None:
        """A request routed by its caller (TxnOffsetCommit: coordinator.sidecar.txn), to the
        owner's fleet listener on this connection's link; `reply(None)`: no answer will come."""
        self._send(address, frame, correlation_id, reply)

    def _send(self, address: Address, frame: bytes, correlation_id: int, reply: Reply) -> None:
        """To the owner at `address`, on the shared link or (PRIVATE APIs) this connection's own,
        after what is in flight on the other path (module docstring)."""
        self._peers.forwarded += 1
        if self._closed:
            reply(None)
            return
        order = self._orders.get(address)
        if order is None:
            order = self._orders[address] = _Order()
        private = int.from_bytes(frame[4:6], "big", signed=True) in fleet_mux.PRIVATE
        if order.held or (order.count and order.private != private):
            order.held.append((private, frame, correlation_id, reply))
            return
        self._dispatch(address, order, private, frame, correlation_id, reply)

    def _dispatch(
        self,
        address: Address,
        order: _Order,
        private: bool,
        frame: bytes,
        correlation_id: int,
        reply: Reply,
    ) -> None:
        order.private = private
        order.count += 1

        def done(response: bytes | None) -> None:
            order.count -= 1
            reply(response)
            if not order.count and order.held:
                self._release(address, order)

        if private:
            self._send_private(address, frame, correlation_id, done)
        else:
            self._peers.shared.send(address, frame, correlation_id, done, self._tag)

    def _release(self, address: Address, order: _Order) -> None:
        held = order.held
        while held and not self._closed:
            private = held[0][0]
            if order.count and order.private != private:
                return
            _, frame, correlation_id, reply = held.popleft()
            self._dispatch(address, order, private, frame, correlation_id, reply)

    def _send_private(
        self, address: Address, frame: bytes, correlation_id: int, reply: Reply
    ) -> None:
        self._via(address, frame, correlation_id, reply)

    def close(self) -> None:
        """The client connection closed: so do its links (what they still carry is answered to
        nobody; a member's parked JoinGroup sees the link go, as when a client disconnects)."""
        self._orders.clear()  # what they held is answered to nobody
        super().close()
