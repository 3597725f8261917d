"""The operator's HTTP endpoint: /metrics, /healthz, /readyz, the status page, /groups, /fleet.

    /          the status page (coordinator.serve.status): every group, its members, partitions
               (committed offset, end offset, lag) and recent rebalances with their cause and
               trigger (and, in a sidecar fleet, the state partitions and their owners);
               server-rendered HTML, refreshes itself every 5 s; `?q=text` fills its group filter.
               The recent rebalances are read back from the history log at start-up
               (`history_dir`), so a restart keeps them.
    /groups    the same as JSON (a list); /groups/<group id> one group, 404 if unknown
    /fleet     in a sidecar fleet, the fleet document (`Server.fleet_status`, i.e.
               coordinator.sidecar.fleet.Fleet.status) as JSON: this member, the members, every
               state partition's status, owner, epoch and load; 404 outside a fleet
    /upstream  in sidecar mode, the upstream cluster as the sidecar sees it (reachable or not, why,
               brokers, topics, topics absent from its metadata and not yet deleted); 404 otherwise
    /metrics   Prometheus text exposition (coordinator.serve.metrics)
    /healthz   200 while the process serves HTTP at all (liveness)
    /readyz    200 once the log is loaded and the Kafka listener accepts (in sidecar mode: and the
               upstream answered its last metadata refresh; in a fleet: and this member loaded
               the state partitions it owns); 503 before, while the upstream is unreachable,
               during a reload after a disk failure, and after shutdown began (readiness)

Invariants:
- It runs on the coordinator's own event loop: the pages read the core, which only the loop
  thread may touch. Nothing here blocks: a request is parsed from what the socket delivered and
  answered from memory (generating the exposition for thousands of groups takes milliseconds).
- Read-only: GET and HEAD only. A request line and headers larger than MAX_HEAD_BYTES, or a
  client idle longer than IDLE_TIMEOUT_S, close the connection; keep-alive is honoured so
  Prometheus reuses its connection.
- Everything a client of the Kafka port chose (group ids, client ids) reaches the page escaped;
  the page carries a Content-Security-Policy that forbids every script but the page's own filter
  (allowed by its hash), every external resource, and forms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from coordinator.serve import metrics as metrics_mod
from coordinator.serve.addresses import parse_host_port
from coordinator.serve.history import recent_rebalances
from coordinator.serve.metrics import Metrics
from coordinator.serve.status import (
    FILTER_SCRIPT_CSP,
    RebalanceHistory,
    StatusProvider,
    install_history,
    readiness,
    record_from_history,
    render_html,
)

if TYPE_CHECKING:
    from coordinator.serve.server import Server

log = logging.getLogger("groupcoord.http")

MAX_HEAD_BYTES = 16 * 1024
IDLE_TIMEOUT_S = 30.0
_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; "
    f"script-src {FILTER_SCRIPT_CSP}; base-uri 'none'; form-action 'none'"
)
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}  # fmt: skip


@dataclass
class Observability:
    """What `start` attached to a server: metrics (None when off), rebalance history, the status
    provider and, when listening, the HTTP server and its bound port."""

    metrics: Metrics | None
    history: RebalanceHistory
    status: StatusProvider
    http: asyncio.Server | None = None
    port: int | None = None
    _connections: set[asyncio.Task[None]] = field(default_factory=set)

    async def close(self) -> None:
        if self.http is not None:
            self.http.close()
            for task in list(self._connections):
                task.cancel()
            await self.http.wait_closed()
            self.http = None


def observe(server: Server, *, metrics: bool = True, per_group: bool = False) -> Observability:
    """Attach the event sinks (metrics, rebalance history and its log line) without listening."""
    history = install_history(server, time.time)
    installed = metrics_mod.install(server, per_group=per_group) if metrics else None
    return Observability(installed, history, StatusProvider(server, history))


async def restore_rebalances(history: RebalanceHistory, history_dir: Path) -> int:
    """Read the last rebalances of each group back from the history log (off the loop) into
    `history`: the status page's list survives a restart. -> how many were put back. Call it
    before `server.start()`: entries of this run are skipped by time, older ones come first."""
    started_ms = time.time_ns() // 1_000_000
    try:
        recent = await asyncio.to_thread(
            recent_rebalances, history_dir, history.per_group, before_ms=started_ms
        )
    except OSError as exc:
        log.warning("recent rebalances not read back from %s: %s", history_dir, exc)
        return 0
    restored = history.restore(
        {gid: [record_from_history(e) for e in events] for gid, events in recent.items()}
    )
    if restored:
        log.info(
            "read back %d recent rebalance(s) of %d group(s) from the history log",
            restored,
            len(recent),
        )
    return restored


async def start_http(
    server: Server,
    host: str,
    port: int,
    *,
    per_group: bool = False,
    history_dir: Path | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Observability:
    """Attach metrics and history to `server` and serve HTTP on host:port (0 = any free port).
    `history_dir`: the history log to read the recent rebalances back from. `ssl_context`:
    serve HTTPS instead (--metrics-tls: the Kafka listener's certificate, issue 22).

    Call it before `server.start()` so /healthz answers while the log replays."""
    obs = observe(server, per_group=per_group)
    if history_dir is not None:
        await restore_rebalances(obs.history, history_dir)
    handler = _Handler(server, obs)

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        obs._connections.add(task)
        try:
            await handler.serve(reader, writer)
        finally:
            obs._connections.discard(task)

    obs.http = await asyncio.start_server(
        on_connect, host, port, limit=MAX_HEAD_BYTES, reuse_address=True, ssl=ssl_context
    )
    obs.port = int(obs.http.sockets[0].getsockname()[1])
    scheme = "https" if ssl_context is not None else "http"
    log.info("metrics and status page on %s://%s:%d/", scheme, host, obs.port)
    return obs


async def start(
    server: Server,
    listen: str,
    *,
    per_group: bool = False,
    history_dir: Path | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Observability:
    """The CLI's one call: `listen` is --metrics-listen; '' keeps the rebalance log line and
    history but collects no metrics and opens no port (and reads no history back: nothing
    would show it)."""
    if not listen:
        return observe(server, metrics=False)
    host, port = parse_host_port(listen)
    return await start_http(
        server, host, port, per_group=per_group, history_dir=history_dir, ssl_context=ssl_context
    )


class _Handler:
    def __init__(self, server: Server, obs: Observability) -> None:
        self.server = server
        self.obs = obs

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    async with asyncio.timeout(IDLE_TIMEOUT_S):  # (3.11's wait_for can drop
                        head = await reader.readuntil(b"\r\n\r\n")  # a cancellation)
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
                    return
                keep_alive = await self._one(head, reader, writer)
                await writer.drain()
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _one(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self._write(writer, 400, "text/plain", b"bad request\n", head_only=False, close=True)
            return False
        method, target, version = parts
        headers = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        length = headers.get("content-length", "0")
        if not length.isdigit() or int(length) > MAX_HEAD_BYTES:
            self._write(writer, 400, "text/plain", b"bad request\n", head_only=False, close=True)
            return False
        if int(length):
            await reader.readexactly(int(length))  # a body on GET: read and ignore
        connection = headers.get("connection", "").lower()
        keep_alive = connection != "close" and (version == "HTTP/1.1" or connection == "keep-alive")
        if method not in ("GET", "HEAD"):
            self._write(writer, 405, "text/plain", b"read-only: GET and HEAD\n",
                        head_only=False, close=not keep_alive, allow="GET, HEAD")  # fmt: skip
            return keep_alive
        url = urlsplit(target)
        status, ctype, body = self.route(url.path, url.query)
        self._write(writer, status, ctype, body, head_only=method == "HEAD", close=not keep_alive)
        return keep_alive

    def route(self, path: str, query: str = "") -> tuple[int, str, bytes]:
        """(status, content type, body) for a GET of `path`. Runs on the loop thread."""
        obs = self.obs
        if path == "/metrics":
            if obs.metrics is None:
                return 404, "text/plain", b"metrics are off\n"
            return 200, CONTENT_TYPE_LATEST, generate_latest(obs.metrics.registry)
        if path == "/healthz":
            return 200, "text/plain", b"ok\n"
        if path == "/readyz":
            ready, why = readiness(self.server)
            return (200 if ready else 503), "text/plain", (why + "\n").encode()
        if path in ("/", "/index.html"):
            q = parse_qs(query).get("q", [""])[0]
            page = render_html(
                obs.status.summary(),
                obs.status.groups(),
                time.time(),
                fleet=self._fleet(),
                query=q,
            )
            return 200, "text/html; charset=utf-8", page.encode()
        if path in ("/fleet", "/fleet/"):
            fleet = self._fleet()
            if fleet is None:
                return 404, "text/plain", b"not in a sidecar fleet\n"
            return 200, "application/json", _json(fleet)
        if path in ("/groups", "/groups/"):
            return 200, "application/json", _json(obs.status.groups())
        if path in ("/upstream", "/upstream/"):
            upstream = self.server.upstream_status
            if upstream is None:
                return 404, "text/plain", b"not in sidecar mode\n"
            return 200, "application/json", _json(upstream())
        if path.startswith("/groups/"):
            group = obs.status.group(unquote(path[len("/groups/") :]))
            if group is None:
                return 404, "application/json", _json({"error": "no such group"})
            return 200, "application/json", _json(group)
        return 404, "text/plain", b"not found\n"

    def _fleet(self) -> dict[str, Any] | None:
        """The fleet document, or None outside a fleet (the fleet sets `Server.fleet_status`)."""
        status = self.server.fleet_status
        return None if status is None else status()

    @staticmethod
    def _write(
        writer: asyncio.StreamWriter,
        status: int,
        ctype: str,
        body: bytes,
        *,
        head_only: bool,
        close: bool,
        allow: str | None = None,
    ) -> None:
        head = [
            f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}",
            f"Content-Type: {ctype}",
            f"Content-Length: {len(body)}",
            "Cache-Control: no-store",
            "X-Content-Type-Options: nosniff",
        ]
        if ctype.startswith("text/html"):
            head.append(f"Content-Security-Policy: {_CSP}")
        if allow:
            head.append(f"Allow: {allow}")
        if close:
            head.append("Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if not head_only:
            writer.write(body)


def _json(value: object) -> bytes:
    return json.dumps(value, indent=1, sort_keys=False).encode() + b"\n"
