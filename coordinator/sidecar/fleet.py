"""A sidecar fleet: every groupcoord in front of one upstream cluster acts as ONE coordinator.

Design (docs/sidecar.md, "Sidecar fleet"; issue 21):
- State: the records of the local log go to a compacted topic on the upstream
  (coordinator.sidecar.state_topic), a group on partition hash(group.id) % N, through
  `FleetJournal` (persist-then-reply, acks=all, batched per partition).
- Ownership, design (a): the members form a consumer group on the upstream (`fleet_group`)
  subscribed to the state topic, with our own assignor; a member owns the partitions assigned to
  it. The upstream's group coordinator is the arbiter: we build no consensus. The assignor keeps
  partitions where they are when it can (a member joining or leaving moves only its share) and
  hands every member the whole owner map (partition -> member address) in its assignment's
  user data, which routing needs.
- Fencing: a new owner writes a claim with epoch = the group generation (or one above the
  partition's last claim, if the upstream's generation was reset), reads the partition to its
  end, checks its claim won, and only then serves it; meanwhile its groups answer
  COORDINATOR_LOAD_IN_PROGRESS. Replay ignores records of any other epoch/owner, and a former
  owner's next write finds the newer claim and fails (state_topic's docstring).
- Lease: a member answers for a partition only while its writer proved ownership within
  `lease_ms` (an acknowledged write, or a `verify` every `verify_interval_ms` finding the end
  where it expected it, while requests come and for IDLE_VERIFY_S after: an idle member asks
  nothing, and its first request after that may answer COORDINATOR_LOAD_IN_PROGRESS once).
  A member paused past its session (SIGSTOP, a long GC) wakes with its lease expired and
  answers COORDINATOR_LOAD_IN_PROGRESS until a verify either renews it or finds the claim that
  fenced it (then NOT_COORDINATOR): it never answers from state another member has taken over.
- Routing: clients only ever talk to their own sidecar; requests for a group owned elsewhere are
  forwarded over internal connections to the owner's fleet listener (coordinator.sidecar.forward)
  by `locate` (coordinator.sidecar.placement).

- Security: with a secured listener, the ACLs and SCRAM credentials are the whole fleet's, on a
  topic of their own that every member follows (coordinator.sidecar.fleet_security), read to
  its end before the member joins; and the fleet listener is mutual TLS that admits only other
  members (coordinator.sidecar.fleet_tls), since what they forward is not judged again.

Invariants:
- A partition is in exactly one `Part.status`: unassigned, loading, serving, remote, fenced.
- Only `serving` partitions have groups in the core and a writer in the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError

from coordinator.security.client import PLAINTEXT, ClientSecurity
from coordinator.serve.addresses import parse_host_port
from coordinator.serve.listener import Listening, start_listener
from coordinator.sidecar.fleet_assignor import OwnerMap, assignor, listener
from coordinator.sidecar.fleet_journal import SECURITY, FleetJournal, PartitionWriter
from coordinator.sidecar.fleet_security import SecurityTopic
from coordinator.sidecar.fleet_security import topic_name as security_topic_name
from coordinator.sidecar.fleet_tls import FleetTls, PeerAdmission
from coordinator.sidecar.fleet_watch import PeerWatch, evict
from coordinator.sidecar.placement import (
    LOADING,
    LOCAL,
    UNKNOWN,
    Placement,
    Where,
)
from coordinator.sidecar.state_topic import (
    Claim,
    Fenced,
    Replay,
    StateTopic,
    StateUnavailable,
    partition_for,
)
from coordinator.sidecar.upstream_clients import client_options

if TYPE_CHECKING:
    from coordinator.serve.server import Server
    from coordinator.sidecar.proxy import Sidecar

log = logging.getLogger("groupcoord.fleet")

RETRY_MIN_S = 0.5
RETRY_MAX_S = 5.0
IDLE_VERIFY_S = 30.0  # leases are kept proven this long after the last request


@dataclass(slots=True)
class FleetOptions:
    bootstrap: str
    state_topic: str = "__groupcoord_state"
    partitions: int = 50
    replication_factor: int = -1  # -1: the cluster's default (KIP-464)
    min_insync_replicas: int = 0  # 0: the cluster's default
    listen: tuple[str, int] = ("0.0.0.0", 9094)
    advertise: tuple[str, int] | None = None
    group: str = "groupcoord-fleet"
    session_timeout_ms: int = 6_000  # within a stock Kafka's group.min.session.timeout.ms
    lease_ms: int = 4_500
    verify_interval_ms: int = 1_000
    security: ClientSecurity = PLAINTEXT  # TLS/SASL of its aiokafka clients
    tls: FleetTls | None = None  # a secured listener: mutual TLS between members (fleet_tls)


@dataclass(slots=True)
class Part:
    partition: int
    status: str = "unassigned"  # unassigned | loading | serving | remote | fenced
    owner: str | None = None  # the owning member's fleet address
    epoch: int | None = None
    load_seconds: float | None = None
    loaded_at: float | None = None  # wall clock
    writer: PartitionWriter | None = None
    epoch_floor: int = 0  # claim at least this epoch (above an older era's claims)


FLEET_PORT = 9094


@functools.lru_cache(maxsize=256)
def _owner_address(owner: str) -> tuple[str, int]:
    """A partition's owner as `locate` forwards to it: parsed once, not on every request."""
    return parse_host_port(owner)


@functools.lru_cache(maxsize=256)
def _remote(owner: str) -> Where:
    """Where `locate` sends a partition's groups that `owner` serves: made once per owner, not
    on every request (a frozen dataclass costs about a microsecond to build)."""
    return Where(Placement.REMOTE, _owner_address(owner))


def fleet_listen_address(
    fleet_listen: str, advertise: tuple[str, int] | None, listen: str
) -> tuple[str, int]:
    """Where the fleet listener binds: --fleet-listen when given; otherwise port 9094 on the
    address the other members are told (--fleet-advertise), else on the client listener's host.
    Never every interface unless asked: a listener that forwards to the groups must not be
    reachable from more places than the operator chose."""
    if fleet_listen:
        return parse_host_port(fleet_listen)
    if advertise is not None:
        return advertise[0], FLEET_PORT
    return parse_host_port(listen)[0], FLEET_PORT


def from_settings(
    server: Server, sidecar: Sidecar, settings: Any, tls: FleetTls | None = None
) -> Fleet | None:
    """The fleet for `serve`'s settings, or None (standalone, or --state local). `tls`: the
    fleet listener's mutual TLS, which serve builds when the client listener is TLS."""
    if not settings.upstream or settings.state != "upstream":
        return None
    advertise = parse_host_port(settings.fleet_advertise) if settings.fleet_advertise else None
    host, port = fleet_listen_address(settings.fleet_listen, advertise, settings.listen)
    options = FleetOptions(
        bootstrap=settings.upstream,
        state_topic=settings.state_topic,
        partitions=settings.state_topic_partitions,
        replication_factor=settings.state_topic_replication_factor,
        min_insync_replicas=settings.state_topic_min_insync_replicas,
        listen=(host, port),
        advertise=advertise,
        group=settings.fleet_group,
        session_timeout_ms=settings.fleet_session_timeout_ms,
        lease_ms=max(1_000, settings.fleet_session_timeout_ms * 3 // 4),
        security=sidecar.options.security,
        tls=tls,
    )
    return Fleet(server, sidecar, options)


class Fleet:
    def __init__(self, server: Server, sidecar: Sidecar, options: FleetOptions) -> None:
        assert isinstance(server.journal, FleetJournal), "serve builds the fleet's journal"
        self.server = server
        self.sidecar = sidecar
        self.options = options
        self.journal: FleetJournal = server.journal
        self.member_id = uuid.uuid4().hex
        self.topic = StateTopic(
            options.state_topic,
            options.partitions,
            options.replication_factor,
            options.min_insync_replicas,
            lambda: client_options(options.bootstrap, options.security),
            sidecar.upstreams,  # the records go on the sidecar's own links (state_produce)
            functools.partial(sidecar.observe_metadata, full=False),
        )
        # ACLs and credentials, when the listener is secured (coordinator.sidecar.fleet_security).
        self.security: SecurityTopic | None = None
        if server.gate is not None:
            self.security = SecurityTopic(
                server,
                security_topic_name(options.state_topic),
                options.replication_factor,
                options.min_insync_replicas,
                lambda: client_options(options.bootstrap, options.security),
            )
        self.admission: PeerAdmission | None = None
        if options.tls is not None:  # before any peer link is made
            sidecar.peer_links.security = options.tls.client_security
            self.admission = PeerAdmission(options.tls, server)
        self.parts = [Part(p) for p in range(options.partitions)]
        self.address = ""  # host:port of our fleet listener, as peers reach it
        self.owner_map = OwnerMap()
        self.generation = -1
        self.ready = False
        self.rebalances = 0
        self.last_error: str | None = None
        self.membership_error: str | None = None  # a fatal answer to the fleet group's join
        self._listener: Listening | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._assigning: asyncio.Task[None] | None = None
        self._stopping = False
        self._pending_owners: dict[int, tuple[str, str]] = {}  # the assignor's last owner map
        self._verify_wanted = asyncio.Event()
        self._asked_at = 0.0  # when a request last found a partition we serve
        self._pending_members: dict[str, str] = {}  # fleet address -> upstream member id
        self.members: dict[str, str] = {}  # the same, as of the current assignment
        self.worker_of: dict[str, int] = {}  # fleet address -> worker index (fleet_assignor)
        # A dead member leaves the fleet group at once (coordinator.sidecar.fleet_watch).
        self.watch = PeerWatch(self._member_died, lambda: sidecar.peer_links.security)
        sidecar.locator = self
        sidecar.owners = self
        server.ready_check = self.readiness
        server.fleet_status = self.status

    # -- placement.Locator -----------------------------------------------------------------------

    def locate(self, group_id: str) -> Where:
        part = self.parts[partition_for(group_id, len(self.parts))]
        status = part.status
        if status == "serving":
            writer = part.writer
            if writer is None or writer.failed is not None:
                return UNKNOWN
            now = time.monotonic()
            self._asked_at = now
            if not self._verify_wanted.is_set():
                self._verify_wanted.set()  # keep the leases proven (`_verify_loop`)
            if now - writer.proven_at < self.options.lease_ms / 1000:
                return LOCAL
            # The lease ran out (idle, or paused): never answered from, until the verify just
            # asked for renews it or finds us fenced. Retried in place meanwhile.
            return LOADING
        if status == "loading":
            return LOADING
        if status == "remote" and part.owner:
            return _remote(part.owner)
        if status == "unassigned":
            # The fleet is forming (a member that just started, or one still joining) or the
            # partition is between owners: what a Kafka broker answers while it loads its
            # coordinator partitions, which every client retries in place. NOT_COORDINATOR
            # would be wrong here (the client's coordinator is this sidecar and stays it) and
            # librdkafka fails a synchronous commit on it instead of retrying.
            return LOADING
        return UNKNOWN  # fenced: until the fleet group's next assignment

    def peers(self) -> list[tuple[str, int]]:
        addresses = {addr for _, addr in self.owner_map.owners.values() if addr != self.address}
        return [parse_host_port(a) for a in sorted(addresses)]

    # -- life cycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen for peers, then join in the background: the upstream may not be up yet, and
        the sidecar keeps answering (group APIs with COORDINATOR_LOAD_IN_PROGRESS) until it is."""
        from coordinator.sidecar.proxy import SidecarConnection

        host, port = self.options.listen
        tls, admit = self.options.tls, self.admission
        if tls is None:
            self._listener = await start_listener(
                lambda: SidecarConnection(self.sidecar, None, peer=True), host, port
            )
        else:  # mutual TLS, members only (coordinator.sidecar.fleet_tls)
            self._listener = await asyncio.get_running_loop().create_server(
                lambda: SidecarConnection(self.sidecar, None, peer=True, admit=admit),
                host,
                port,
                ssl=tls.server_context,
                reuse_address=True,
                backlog=1024,
            )
        bound = self._listener.sockets[0].getsockname()
        if self.options.advertise is not None:
            adv_host, adv_port = self.options.advertise
        else:
            adv_host, adv_port = host, bound[1]
            if adv_host in ("0.0.0.0", "::", ""):
                adv_host = socket.gethostbyname(socket.gethostname())
        self.address = f"{adv_host}:{adv_port or bound[1]}"
        log.info(
            "fleet member %s (fleet group %s, state topic %s) listening for peers on %s:%d (%s)",
            self.address,
            self.options.group,
            self.options.state_topic,
            host,
            bound[1],
            "plaintext" if tls is None else f"mutual TLS, as {tls.principal}",
        )
        self._spawn(self._run())

    async def _run(self) -> None:
        delay = RETRY_MIN_S
        last = ""
        while not self._stopping:
            try:
                await self.topic.start()
                if self.security is not None:  # before any client is judged: readiness
                    assert self.topic.producer is not None
                    await self.security.start(self.topic.producer)
                    self.journal.security_writer(self.security.send)
                self.journal.partitions = self.topic.partitions
                if len(self.parts) != self.topic.partitions:
                    self.parts = [Part(p) for p in range(self.topic.partitions)]
                await self.sidecar.refresh()  # topics first: loaded groups compare their hashes
                await self._join()
                break
            except Exception as exc:
                self.last_error = str(exc)
                if str(exc) != last:
                    log.error("fleet cannot start yet (%s); retrying", exc)
                    last = str(exc)
                if self.security is not None:
                    await self.security.stop()
                await self.topic.stop()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
        if not self._stopping:
            self.last_error = None
            self._spawn(self._verify_loop())
            self._spawn(self._membership_loop())

    async def _join(self) -> None:
        consumer = AIOKafkaConsumer(
            **client_options(self.options.bootstrap, self.options.security),
            group_id=self.options.group,
            enable_auto_commit=False,
            session_timeout_ms=self.options.session_timeout_ms,
            # Capped: a member that learns of a rebalance at its next heartbeat (one that did
            # not see a dead member itself) must not wait a quarter of a long session for it.
            heartbeat_interval_ms=max(100, min(1_000, self.options.session_timeout_ms // 4)),
            max_poll_interval_ms=2**31 - 1,  # we never poll records: membership only
            rebalance_timeout_ms=self.options.session_timeout_ms * 2,
            partition_assignment_strategy=(assignor(self),),
        )
        await consumer.start()
        self._consumer = consumer
        consumer.subscribe([self.topic.name], listener=listener(self))

    async def stop(self) -> None:
        """Leave the fleet group first (the others take our partitions at once), then stop."""
        self._stopping = True
        self.watch.close()
        for task in list(self._tasks):
            task.cancel()
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()
        if self._listener is not None:
            self._listener.close()

    async def close(self) -> None:
        """After the server stopped (its held replies needed the writers)."""
        for part in self.parts:
            if part.writer is not None:
                self.journal.close_writer(part.partition)
                part.writer = None
        if self.security is not None:
            self.journal.close_writer(SECURITY)
            await self.security.stop()
        await self.topic.stop()

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def readiness(self) -> tuple[bool, str]:
        upstream = self.sidecar.readiness()
        if not upstream[0]:
            return upstream
        if self.last_error is not None:
            return False, f"fleet: {self.last_error}"
        if self.membership_error is not None:
            return False, f"fleet: {self.membership_error}"
        if not self.ready:
            return False, "fleet: joining and loading state partitions"
        return True, "ready"

    # -- a dead member (coordinator.sidecar.fleet_watch) ----------------------------------------

    def _member_died(self, address: str) -> None:
        # Its groups are between owners now: LOAD_IN_PROGRESS (retried in place) rather than a
        # forward that fails with NOT_COORDINATOR, until the next assignment places them.
        for part in self.parts:
            if part.status == "remote" and part.owner == address:
                part.status, part.owner = "unassigned", None
        member_id = self.members.get(address)
        if member_id:
            self._spawn(evict(self._consumer, self.options.group, address, member_id))

    # -- assignment ------------------------------------------------------------------------------

    def assigned(self, partitions: set[int], owner_map: OwnerMap) -> None:
        """The fleet group's new assignment (the listener calls this)."""
        self.rebalances += 1
        self.owner_map = owner_map
        self.generation = owner_map.generation
        self.members = dict(self._pending_members)
        self.watch.update({a for a in self.members if a and a != self.address})
        if self._assigning is not None:
            self._assigning.cancel()
        self._assigning = self._spawn(self._take(partitions, owner_map))

    async def _take(self, partitions: set[int], owner_map: OwnerMap) -> None:
        for part in self.parts:
            if part.partition in partitions:
                continue
            self._unload(part)
            owner = owner_map.owners.get(part.partition)
            part.status = "remote" if owner is not None else "unassigned"
            part.owner = None if owner is None else owner[1]
            part.epoch = None
        delay = RETRY_MIN_S
        todo = set(partitions)
        while todo and not self._stopping:
            todo = await self._claim_and_load(todo, owner_map.generation)
            if todo:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
        # Ready from the first assignment fully loaded on (a later rebalance does not make the
        # pod unready: partitions that moved answer COORDINATOR_LOAD_IN_PROGRESS meanwhile).
        self.ready = self.ready or all(self.parts[p].status == "serving" for p in partitions)

    async def _claim_and_load(self, partitions: set[int], generation: int) -> set[int]:
        """Claim, keep what we already serve if nobody wrote since, load the rest. Returns the
        partitions to retry (the upstream failed for them)."""
        retry: set[int] = set()
        claims: dict[int, Claim] = {}
        wanted: dict[int, Claim] = {}
        for p in sorted(partitions):
            part = self.parts[p]
            part.owner = self.address
            if part.status != "serving":
                part.status = "loading"
            # The epoch is the fleet group's generation: the upstream's arbiter (docstring),
            # above an older era's claims if the upstream forgot the group (`_load`).
            epoch = max(generation, part.epoch_floor)
            wanted[p] = Claim(epoch, self.member_id, self.address)
        written = await asyncio.gather(
            *(self.topic.write_claim(p, c) for p, c in wanted.items()), return_exceptions=True
        )
        for (p, claim), offset in zip(wanted.items(), written, strict=True):
            part = self.parts[p]
            writer = part.writer
            if isinstance(offset, BaseException):
                log.warning("cannot claim state partition %d: %s", p, offset)
                self._unload(part)
                part.status = "loading"
                retry.add(p)
            elif (
                part.status == "serving"
                and writer is not None
                and writer.failed is None
                and offset == writer.next_offset
            ):
                writer.claim = claim  # nobody wrote since our last write: keep serving
                writer.next_offset = offset + 1
                writer.proven_at = time.monotonic()
                part.epoch = claim.epoch
            else:
                self._unload(part)
                part.status = "loading"
                claims[p] = claim
        if claims:
            retry |= await self._load(claims)
        loaded = sorted(set(claims) - retry)
        if loaded:
            log.info(
                "serving state partitions %s (generation %d): loaded in %.3f s",
                _ranges(loaded),
                generation,
                max(self.parts[p].load_seconds or 0 for p in loaded),
            )
        return retry

    async def _load(self, claims: dict[int, Claim]) -> set[int]:
        started = time.monotonic()
        try:
            read, ends = await self.topic.read(dict.fromkeys(claims, 0))
        except StateUnavailable as exc:
            log.warning("cannot read state partitions %s: %s", sorted(claims), exc)
            return set(claims)
        retry: set[int] = set()
        for p, claim in claims.items():
            part = self.parts[p]
            replay = Replay()
            for record in read[p]:
                replay.feed(record.key, record.value, record.headers, record.timestamp)
            won = replay.claim
            if won is None or (won.epoch, won.owner) != (claim.epoch, claim.owner):
                if won is not None and won.epoch > claim.epoch and _older_era(replay):
                    # The upstream forgot the fleet group (all members gone past its retention)
                    # and its generations restarted below the claims in the topic: claim above
                    # them. A claim this old is no live member's: a member that lost its
                    # partition to a newer generation lost it moments ago.
                    log.warning(
                        "state partition %d: claims of an earlier fleet era (epoch %d); "
                        "claiming above them",
                        p,
                        won.epoch,
                    )
                    part.epoch_floor = won.epoch + 1
                    retry.add(p)
                    continue
                # A newer generation's member has it: ours is a stale assignment, which the
                # fleet group's next rebalance replaces.
                log.warning("state partition %d: claim lost to %s", p, won)
                part.status = "fenced"
                part.epoch = None if won is None else won.epoch
                continue
            writer = self.journal.new_writer(
                self.topic, p, claim, ends[p], replay.latest, self._writer_failed
            )
            if replay.dirty:  # a former owner's records are the latest of their keys
                writer.repaired_keys = len(replay.dirty)
                writer.enqueue([(k, replay.latest.get(k)) for k in sorted(replay.dirty)], 0)
            self._serve(part, writer, replay, claim.epoch, started)
        runtime = self.server.runtime
        if runtime is not None:
            # Once for the whole batch: it compares every group's stored topic hash.
            runtime.apply(self.server.core.topics_loaded(runtime.now_ms()))
        return retry

    def _serve(
        self, part: Part, writer: PartitionWriter, replay: Replay, epoch: int, started: float
    ) -> None:
        server = self.server
        runtime = server.runtime
        assert runtime is not None
        # A reload racing a new assignment may find the partition's groups loaded already:
        # replaying over them would orphan their parked requests, so they go first.
        here = self._groups_of(part.partition)
        if here:
            runtime.apply(server.core.unload_groups(here))
        now_ms = runtime.now_ms()
        runtime.apply(server.core.load_groups(replay.records(), now_ms))
        part.writer = writer
        part.epoch = epoch
        part.status = "serving"
        self._asked_at = time.monotonic()  # proven for IDLE_VERIFY_S: its clients are coming
        self._verify_wanted.set()
        part.load_seconds = time.monotonic() - started
        part.loaded_at = time.time()
        log.debug(
            "serving state partition %d (epoch %d, %d keys, loaded in %.3f s)",
            part.partition,
            epoch,
            len(replay.latest),
            part.load_seconds,
        )

    def _unload(self, part: Part) -> None:
        if part.writer is not None:
            self.journal.close_writer(part.partition)
            part.writer = None
        if part.status != "serving":
            return
        server = self.server
        ids = self._groups_of(part.partition)
        if ids and server.runtime is not None:
            server.runtime.apply(server.core.unload_groups(ids))
        part.status = "unassigned"

    def _groups_of(self, partition: int) -> list[str]:
        n = len(self.parts)
        state = self.server.core.state
        groups = [*state.groups, *state.consumer.groups]  # classic and KIP-848 (issue 23)
        return [g for g in groups if partition_for(g, n) == partition]

    def _writer_failed(self, writer: PartitionWriter, exc: BaseException) -> None:
        part = self.parts[writer.partition]
        if part.writer is not writer:
            return
        log.warning("state partition %d: %s", part.partition, exc)
        self._unload(part)
        if isinstance(exc, Fenced):
            part.status = "fenced"  # until the fleet group's next assignment
            return
        part.status = "loading"  # the upstream failed a write: reload it, as Kafka does
        generation = self.generation
        self._spawn(self._reload(part.partition, generation))

    async def _reload(self, partition: int, generation: int) -> None:
        delay = RETRY_MIN_S
        while not self._stopping and self.generation == generation:
            if not await self._claim_and_load({partition}, generation):
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    async def _membership_loop(self) -> None:
        """aiokafka holds a fatal answer to the fleet group's JoinGroup (INVALID_SESSION_TIMEOUT
        from a Kafka whose group.min.session.timeout.ms is above --fleet-session-timeout-ms, a
        group authorization failure) until the application polls; we never poll records, so
        without this the member would wait, silent and unready, forever. A poll of no records
        (every assigned partition is paused) hands it over: said once per distinct error and on
        /readyz, and the consumer's next rejoin is the retry."""
        last = ""
        while not self._stopping:
            consumer = self._consumer
            try:
                if consumer is not None:
                    await consumer.getmany(timeout_ms=0)
                self.membership_error = None
                last = ""
            except KafkaError as exc:
                self.membership_error = f"the fleet group {self.options.group}: {exc!r}"
                if repr(exc) != last:
                    log.error("fleet group %s refused (%r); retrying", self.options.group, exc)
                    last = repr(exc)
            await asyncio.sleep(self.options.verify_interval_ms / 1000)

    async def _verify_loop(self) -> None:
        interval = self.options.verify_interval_ms / 1000
        while not self._stopping:
            # Every interval while requests come (and for IDLE_VERIFY_S after the last), then
            # nothing until one comes: an idle member asks the upstream nothing. The first
            # request after that answers LOAD_IN_PROGRESS once if the lease ran out meanwhile.
            if time.monotonic() - self._asked_at > IDLE_VERIFY_S:
                self._verify_wanted.clear()
                await self._verify_wanted.wait()
            else:
                await asyncio.sleep(interval)
            writers = [p.writer for p in self.parts if p.status == "serving" and p.writer]
            if not writers:
                continue
            asked_at = time.monotonic()
            try:
                ends = await self.topic.end_offsets([w.partition for w in writers])
            except StateUnavailable as exc:
                log.debug("verify: %s", exc)
                continue
            await asyncio.gather(*(w.verify(ends[w.partition], asked_at) for w in writers))

    # -- introspection ---------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The /fleet document: this member, and every state partition's owner and load."""
        core_groups = self.server.core.state.groups
        n = len(self.parts)
        counts: dict[int, int] = {}
        for g in core_groups:
            p = partition_for(g, n)
            counts[p] = counts.get(p, 0) + 1
        return {
            "member_id": self.member_id,
            "address": self.address,
            "state_topic": self.topic.name,
            "fleet_group": self.options.group,
            "generation": self.generation,
            "ready": self.ready,
            "rebalances": self.rebalances,
            "error": self.last_error,
            "members": sorted({addr for _, addr in self.owner_map.owners.values()}),
            # The state writes (coordinator.sidecar.state_produce): batches / produce_requests is
            # how many partitions' batches a Produce carried.
            "produce_requests": self.topic.records.requests,
            "batches": self.topic.records.batches,
            "partitions": [
                {
                    "partition": part.partition,
                    "status": part.status,
                    "owner": part.owner,
                    "epoch": part.epoch,
                    "load_seconds": part.load_seconds,
                    "loaded_at": part.loaded_at,
                    "groups": counts.get(part.partition, 0),
                    "repaired_keys": 0 if part.writer is None else part.writer.repaired_keys,
                }
                for part in self.parts
            ],
        }


OLDER_ERA_S = 120.0  # a winning claim this old, above our generation, is from an earlier era


def _older_era(replay: Replay) -> bool:
    return replay.claim_ms > 0 and time.time() * 1000 - replay.claim_ms > OLDER_ERA_S * 1000


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (log lines)."""
    out: list[str] = []
    for n in numbers:
        if out and out[-1].split("-")[-1] == str(n - 1):
            out[-1] = out[-1].split("-")[0] + f"-{n}"
        else:
            out.append(str(n))
    return ",".join(out)
