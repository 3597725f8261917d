"""Telling clients that a topic changed: NOT_LEADER_OR_FOLLOWER until they re-read its metadata.

Why (issue 4, scope 7): a rebalance forced by a changed topic hash only helps if the group leader
computes the new assignment from fresh metadata, and in the classic protocol the leader uses its
own metadata cache, refreshed every `metadata.max.age.ms` (5 minutes by default). Every client
re-reads metadata at once when a Fetch (or ListOffsets) partition answers NOT_LEADER_OR_FOLLOWER:
Java's FetchCollector and OffsetFetcher, librdkafka's leader-unavailable path, aiokafka's and
kafka-python's Fetchers all request a metadata update on it. And the leader then waits for that
update before assigning (Java's `updateGroupSubscription -> ensureFreshMetadata`, aiokafka's
`_maybe_wait_metadata`), fetches metadata itself (librdkafka: "partition assignor"), or requests it
right after assigning and rejoins when it shows more partitions (kafka-python's snapshot check).

So, for `window_ms` after topic T changes, a Fetch/ListOffsets partition of T answers
NOT_LEADER_OR_FOLLOWER to a client that has not sent a Metadata request covering T since the
change (on the same connection, or from the same client: same host and client id -- librdkafka
may ask for metadata on its bootstrap connection). Once it has, its fetches work again, so the
signal stops by itself; the window only bounds it for a client that never asks. The error is
Kafka's own statement that the client's metadata for the partition is stale, which is true.

Which changes arm it (the caller decides, coordinator.serve.topic_service): partitions added, racks
changed, a topic re-created under its name. Not a topic's first appearance: no client can hold
metadata of a topic older than the topic itself, and a client that fetches it read it already
(clients that read it through the sidecar before groupcoord's own refresh did were refused for
10 s by this guard; issue 27). A deleted topic is remembered as *gone* for `gone_ms` instead,
for every client: the sidecar answers its partitions UNKNOWN_TOPIC_OR_PARTITION itself, as Kafka
does, whatever the upstream would say; standalone's catalog already answers so.

Pure: no I/O; `now_ms` is passed in. Keys are opaque: the server passes `id(connection)` and
(client host, client id).
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_WINDOW_MS = 10_000
# How long a deleted topic is answered as gone: metadata.max.age.ms's default, by when every client
# has re-read its metadata even if no fetch error made it.
DEFAULT_GONE_MS = 300_000
MAX_GONE = 10_000  # deleted topics remembered at once; the oldest is forgotten first
STALE = "stale_metadata"  # why a topic's partitions were answered for the client: see `why`
GONE = "topic_gone"
Identity = tuple[str, str]  # (client host, client id)
_NOTHING: frozenset[str] = frozenset()


class _Change:
    __slots__ = ("changed_ms", "connections", "identities")

    def __init__(self, changed_ms: int) -> None:
        self.changed_ms = changed_ms
        self.connections: set[int] = set()
        self.identities: set[Identity] = set()


class RefreshSignal:
    __slots__ = ("_changes", "_gone", "answered", "gone_ms", "window_ms")

    def __init__(self, window_ms: int = DEFAULT_WINDOW_MS, gone_ms: int = DEFAULT_GONE_MS) -> None:
        self.window_ms = window_ms
        self.gone_ms = gone_ms
        self._changes: dict[str, _Change] = {}
        self._gone: dict[str, int] = {}  # deleted topic -> when; insertion order is age order
        # Requests answered for the client because of this signal, by why (STALE, GONE).
        self.answered: dict[str, int] = {STALE: 0, GONE: 0}

    def __bool__(self) -> bool:
        """Whether any topic changed recently: the Fetch path skips everything else when not."""
        return bool(self._changes) or bool(self._gone)

    def topic_changed(self, name: str, now_ms: int) -> None:
        """Clients' metadata of `name` is stale: arm the guard for it."""
        self._changes[name] = _Change(now_ms)
        self._gone.pop(name, None)

    def topic_created(self, name: str) -> None:
        """`name` appeared (first appearance): nothing to signal; it is not gone any more."""
        self._gone.pop(name, None)

    def topic_deleted(self, name: str, now_ms: int) -> None:
        self._changes.pop(name, None)
        gone = self._gone
        gone.pop(name, None)
        gone[name] = now_ms
        if len(gone) > MAX_GONE:
            del gone[next(iter(gone))]

    def gone(self, name: str) -> bool:
        """Whether `name` was deleted recently (a re-appearance is then a re-creation)."""
        return name in self._gone

    def why(self, name: str) -> str:
        return GONE if name in self._gone else STALE

    def metadata_read(
        self, connection: int, identity: Identity, topics: Iterable[str] | None, now_ms: int
    ) -> None:
        """A Metadata request was answered; `topics` None = all topics."""
        changes = self._changes
        if not changes:
            return
        self._expire(now_ms)
        names = changes.keys() if topics is None else [t for t in topics if t in changes]
        for name in names:
            change = changes[name]
            change.connections.add(connection)
            change.identities.add(identity)

    def stale_topics(self, connection: int, identity: Identity, now_ms: int) -> frozenset[str]:
        """The topics whose partitions this client's Fetch/ListOffsets should see as moved
        (changed, not re-read since) or gone (deleted)."""
        if not self:
            return _NOTHING
        self._expire(now_ms)
        stale = {
            name
            for name, c in self._changes.items()
            if connection not in c.connections and identity not in c.identities
        }
        stale.update(self._gone)
        return frozenset(stale)

    def _expire(self, now_ms: int) -> None:
        cutoff = now_ms - self.window_ms
        expired = [n for n, c in self._changes.items() if c.changed_ms <= cutoff]
        for name in expired:
            del self._changes[name]
        gone = self._gone
        cutoff = now_ms - self.gone_ms
        while gone:
            name, at = next(iter(gone.items()))
            if at > cutoff:
                break
            del gone[name]
