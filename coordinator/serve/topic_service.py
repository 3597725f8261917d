"""The server side of topic changes: the admin APIs, `Server.topic_changed`, and the refresh signal.

`TopicService` is the asyncio-side glue of issue 4; the decisions are in pure modules:
broker.topic_admin (what an admin request changes and answers), core.topic_watch (what
a change does to the groups, via `GroupCoordinator.topic_changed`) and broker.refresh_signal
(which Fetch/ListOffsets partitions answer NOT_LEADER_OR_FOLLOWER so clients re-read metadata).

Invariants:
- Every topic change goes through `GroupCoordinator.topic_changed` and then the runtime, so its
  record is persisted like any other and an admin reply leaves only once it is durable
  (`Runtime.apply_then`); a refused or failed write answers every topic NOT_CONTROLLER, on which
  admin clients refresh metadata and retry.
- On a change, the refresh signal is armed and every parked Fetch that includes the topic is
  answered at once, in the same loop step and so before any Heartbeat can answer
  REBALANCE_IN_PROGRESS: clients see "your metadata is stale" before "rebalance", and request the
  metadata update that their leader's assignment will then use (see broker.refresh_signal).
  A deletion answers them at once too (UNKNOWN_TOPIC_OR_PARTITION, as Kafka completes a delayed
  fetch whose partition went away): that is how the members learn of it and rejoin. A topic's
  first appearance arms nothing.
- Every request the signal answers for the client (rather than as the data would) is counted by
  why (`signal.answered`, exported as groupcoord_topic_signal_answers_total) and logged at DEBUG.
- Declared `--topic`s are remembered so a reload from the log (disk recovery) starts from them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Sized
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from coordinator.broker import answers as broker
from coordinator.broker import topic_admin
from coordinator.broker.refresh_signal import GONE, RefreshSignal
from coordinator.core.effects import Effects
from coordinator.core.events import (
    Event,
    GroupMetadataHashChanged,
    OffsetsDeleted,
    RebalanceCause,
)
from coordinator.core.topic_watch import change_cause
from coordinator.core.topics import TopicInfo
from protocol import apis, codec
from protocol.codec import RequestHeader

if TYPE_CHECKING:
    from coordinator.core.coordinator import GroupCoordinator
    from coordinator.core.topics import TopicCatalog
    from coordinator.serve.runtime import EventSink, Runtime

log = logging.getLogger("groupcoord.topics")


class Connection(Protocol):
    """What the topic service needs of a client connection (coordinator.serve.server.Connection and
    the sidecar's connections are ones)."""

    fetch_timer: asyncio.TimerHandle | None  # this connection's parked Fetch, if any

    @property
    def client_host(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def send(self, data: bytes) -> None: ...


class Server(Protocol):
    """What the topic service needs of the server (coordinator.serve.server.Server is one)."""

    @property
    def catalog(self) -> TopicCatalog: ...

    @property
    def core(self) -> GroupCoordinator: ...

    @property
    def runtime(self) -> Runtime | None: ...

    @property
    def event_sinks(self) -> list[EventSink]: ...

    @property
    def connections(self) -> Sized: ...


_METADATA_V0 = 0


def _merge(into: Effects, fx: Effects) -> None:
    into.replies.extend(fx.replies)
    into.records.extend(fx.records)
    into.events.extend(fx.events)
    into.share_updates.extend(fx.share_updates)


def log_hash_change(event: Event) -> None:
    """An event sink: one log line per group that a topic change sends into a rebalance."""
    if type(event) is GroupMetadataHashChanged:
        log.info(
            "group %s: metadata hash changed (topic %s: %s); %s",
            event.group_id,
            ", ".join(event.topics) or "?",
            event.cause.value,
            "its members rejoin as they notice"
            if event.cause is RebalanceCause.TOPIC_DELETED
            else "rebalancing",
        )


class TopicService:
    def __init__(self, server: Server, new_topic_id: Callable[[], uuid.UUID] = uuid.uuid4) -> None:
        self._server = server
        self._new_topic_id = new_topic_id
        self.declared: tuple[TopicInfo, ...] = tuple(server.catalog)
        self.signal = RefreshSignal()
        # Fetches parked until their max_wait: connection -> (header, request, its timer).
        self._parked: dict[Connection, tuple[RequestHeader, Any, asyncio.TimerHandle]] = {}
        # Changes that arrived before the log was loaded: applied once it is (`loaded`).
        self._early: dict[str, tuple[TopicInfo | None, bool]] = {}  # (info, keep_offsets)
        server.event_sinks.append(log_hash_change)

    def _now_ms(self) -> int:
        runtime = self._server.runtime
        if runtime is not None:
            return runtime.now_ms()
        return int(asyncio.get_running_loop().time() * 1000)

    # -- changes ---------------------------------------------------------------------------------

    def topic_changed(self, name: str, info: TopicInfo | None, keep_offsets: bool = False) -> None:
        """`Server.topic_changed`: apply "topic `name` now looks like `info`" (None = deleted;
        with `keep_offsets`, not certainly: core.topic_watch)."""
        server = self._server
        if server.runtime is None or server.core.loading:
            # Replaying the log would overwrite it, and the log must not grow while it replays.
            self._early[name] = (info, keep_offsets)
            return
        now = self._now_ms()
        before = server.catalog.get(name)
        fx = server.core.topic_changed(name, info, now, keep_offsets)
        if not fx.records:
            return  # nothing changed
        if info is None and not keep_offsets:
            _log_deleted(name, fx)
        self._announce(name, before, info, now)
        server.runtime.apply(fx)

    def delete_offsets(self, name: str) -> None:
        """`Server.delete_topic_offsets`: topic `name` is gone for certain; so are its offsets."""
        server = self._server
        if server.runtime is None or server.core.loading:
            return  # (a sidecar asks only once it serves)
        fx = server.core.delete_topic_offsets(name)
        _log_deleted(name, fx)
        server.runtime.apply(fx)

    def _announce(
        self, name: str, before: TopicInfo | None, info: TopicInfo | None, now_ms: int
    ) -> None:
        """Tell the clients what they need to know of `name` going from `before` to `info`."""
        signal = self.signal
        cause = change_cause(before, info, signal.gone(name))
        if cause is RebalanceCause.TOPIC_CREATED:
            signal.topic_created(name)
            return  # nobody can fetch a topic it has not seen: nothing is parked on it
        if cause is RebalanceCause.TOPIC_DELETED:
            signal.topic_deleted(name, now_ms)
        else:
            signal.topic_changed(name, now_ms)
        self._flush_parked_fetches(name, now_ms)

    def admin(self, conn: Connection, header: RequestHeader, request: Any) -> None:
        """CreateTopics / DeleteTopics / CreatePartitions: answered once durable."""
        server = self._server
        runtime = server.runtime
        assert runtime is not None
        outcome = topic_admin.handle(
            header.api_key, header.api_version, request, server.catalog, self._new_topic_id
        )
        if server.core.loading:  # the catalog is not complete yet; admin clients retry on this
            conn.send(codec.encode_response(header, outcome.failed(ErrorCode.not_controller)))
            return
        now = self._now_ms()
        fx = Effects()
        changed: list[tuple[str, TopicInfo | None, TopicInfo | None]] = []
        for name, info in outcome.changes:
            before = server.catalog.get(name)
            one = server.core.topic_changed(name, info, now)
            if one.records:
                changed.append((name, before, info))
            _merge(fx, one)
        for name, before, info in changed:
            self._announce(name, before, info, now)

        def done() -> None:
            conn.send(codec.encode_response(header, outcome.build()))

        def failed(exc: BaseException) -> None:
            log.error("topic change not durable (%s); answering NOT_CONTROLLER", exc)
            conn.send(codec.encode_response(header, outcome.failed(ErrorCode.not_controller)))

        runtime.apply_then(fx, done, failed)

    # -- loading ---------------------------------------------------------------------------------

    def loaded(self, core: GroupCoordinator, now_ms: int) -> Effects:
        """After the log replayed: compare the groups' stored hashes, then reconcile the declared
        topics with the log (their changes re-check the groups that read them)."""
        fx = core.topics_loaded(now_ms)
        _merge(fx, core.declare_topics(self.declared, now_ms))
        early, self._early = self._early, {}
        for name, (info, keep_offsets) in early.items():
            before = core.topics.get(name)
            one = core.topic_changed(name, info, now_ms, keep_offsets)
            if one.records:
                self._announce(name, before, info, now_ms)
            _merge(fx, one)
        return fx

    def reset_catalog(self) -> None:
        """Before reloading from the log: only the declared topics, as at start-up."""
        self._server.catalog.replace_all(self.declared)

    # -- the broker view -------------------------------------------------------------------------

    def metadata_read(self, conn: Connection, header: RequestHeader, request: Any) -> None:
        """A Metadata request was answered: that client has now seen the topics it asked for."""
        if not self.signal:
            return
        requested = request.topics
        if requested is None or (header.api_version == _METADATA_V0 and not requested):
            topics = None
        else:
            topics = [t.name for t in requested if t.name is not None]
        self.signal.metadata_read(
            id(conn), (conn.client_host, header.client_id), topics, self._now_ms()
        )

    def stale(self, conn: Connection, header: RequestHeader) -> frozenset[str]:
        """Topics whose partitions this client's Fetch/ListOffsets should see as moved or gone."""
        if not self.signal:
            return frozenset()
        return self.signal.stale_topics(
            id(conn), (conn.client_host, header.client_id), self._now_ms()
        )

    def answered(
        self, conn: Any, header: RequestHeader, stale: frozenset[str], topics: Iterable[str]
    ) -> bool:
        """Whether the signal answers this request's `topics` (some are in `stale`); if so,
        count it and say so at DEBUG, naming the client, the topics and why."""
        hit = stale.intersection(topics)
        if not hit:
            return False
        signal = self.signal
        for name in sorted(hit):
            why = signal.why(name)
            signal.answered[why] += 1
            log.debug(
                "answered %s for client %s at %s: topic %s, %s",
                "Fetch" if header.api_key == apis.FETCH else "ListOffsets",
                header.client_id,
                conn.client_host,
                name,
                "deleted" if why == GONE else "its metadata not re-read since the topic changed",
            )
        return True

    def list_offsets(self, conn: Connection, header: RequestHeader, request: Any) -> Any:
        stale = self.stale(conn, header)
        if stale:
            self.answered(conn, header, stale, (t.name for t in request.topics))
        catalog = self._server.catalog
        return broker.list_offsets_response(header.api_version, request, catalog, stale)

    def fetch(self, conn: Connection, header: RequestHeader, request: Any) -> None:
        """Answer a Fetch: at once (an error, or min_bytes <= 0) or after its max_wait, parked
        meanwhile so that a topic change can answer it at once."""
        stale = self.stale(conn, header)
        if stale:
            self.answered(conn, header, stale, (t.topic for t in request.topics))
        response, wait_ms = broker.fetch_response(
            header.api_version, request, self._server.catalog, stale
        )
        data = codec.encode_response(header, response)
        if wait_ms <= 0:
            conn.send(data)
            return
        timer = asyncio.get_running_loop().call_later(wait_ms / 1000, self._send_parked, conn, data)
        conn.fetch_timer = timer
        parked = self._parked
        parked[conn] = (header, request, timer)
        if len(parked) > 2 * len(self._server.connections) + 64:
            for c, (_, _, t) in list(parked.items()):
                if c.closed or c.fetch_timer is not t:
                    del parked[c]

    @staticmethod
    def _send_parked(conn: Connection, data: bytes) -> None:
        """A parked Fetch's max_wait is up: its (empty) answer leaves."""
        conn.fetch_timer = None
        conn.send(data)

    def _flush_parked_fetches(self, name: str, now_ms: int) -> None:
        """Answer at once every parked Fetch that includes `name`: with the signal armed, its
        partitions of `name` now say NOT_LEADER_OR_FOLLOWER."""
        catalog = self._server.catalog
        for conn, (header, request, timer) in list(self._parked.items()):
            if conn.closed or conn.fetch_timer is not timer:
                del self._parked[conn]
                continue
            if not any(t.topic == name for t in request.topics):
                continue
            del self._parked[conn]
            timer.cancel()
            conn.fetch_timer = None
            stale = self.signal.stale_topics(id(conn), (conn.client_host, header.client_id), now_ms)
            self.answered(conn, header, stale, (t.topic for t in request.topics))
            response, _ = broker.fetch_response(header.api_version, request, catalog, stale)
            conn.send(codec.encode_response(header, response))


def _log_deleted(name: str, fx: Effects) -> None:
    deleted = [e for e in fx.events if isinstance(e, OffsetsDeleted)]
    log.warning(
        "topic %s deleted: %d committed offsets of %d groups deleted with it",
        name,
        sum(e.partitions for e in deleted),
        len(deleted),
    )
