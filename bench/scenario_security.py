"""The cost of the listener's security (issue 22): heartbeats over plaintext, TLS and SASL_SSL
with the ACL authorizer, in the same run.

Issue 22: "Bench: heartbeat rate and p99 over TLS vs plaintext on the same run."

The `heartbeat` scenario's groups (1,000 members in 100 groups on 1,000 connections) against three
fresh servers, interleaved per round (a slow spell of the machine hits every mode):
- plaintext: the default listener (the epoll listener and its heartbeat fast path);
- tls: `--security-protocol SSL` (the loop's TLS transport; every request through the gate);
- sasl_ssl_acl: `SASL_SSL` with SASL/PLAIN logins and `--authorizer acl` (each heartbeat is also
  judged against an ACL: GROUP READ on the prefix `bench-`).
Per mode: the closed loop's rate (one heartbeat in flight per connection), its p99, the server's
CPU per heartbeat, and the p99 of an open loop at OPEN_RATE/s (the same offered load for every
mode, measured from the scheduled send time). The certificates are made with the openssl CLI
(tests/support/tls.py); each mode's best of `rounds` runs counts.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path

from bench import loadgen, servers, wire
from bench.__main__ import HB_GROUPS, HB_PER_GROUP, Context, Metric, register

OPEN_RATE = 5_000
USER, PASSWORD = "bench", "bench-secret"
MODES = ("plaintext", "tls", "sasl_ssl_acl")


def make_certs(d: Path) -> tuple[Path, Path, Path]:
    from tests.support.tls import make_certs as make

    certs = make(d)
    return certs.ca, certs.server_cert, certs.server_key


def mode_args(mode: str, d: Path, ca: Path, cert: Path, key: Path) -> list[str]:
    if mode == "plaintext":
        return []
    tls = ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key)]
    if mode == "tls":
        return ["--security-protocol", "SSL", *tls]
    users = d / "users.txt"
    users.write_text(f"{USER}:{PASSWORD}\nadmin:admin-secret\n")
    return [
        "--security-protocol",
        "SASL_SSL",
        *tls,
        "--sasl-users-file",
        str(users),
        "--sasl-mechanisms",
        "PLAIN",
        "--authorizer",
        "acl",
        "--super-users",
        "User:admin",
    ]


def start(ctx: Context, args: list[str], context: ssl.SSLContext | None) -> servers.Server:
    """servers.start_groupcoord, made ready by a TLS handshake when the listener is TLS (its
    plaintext probe would be refused)."""
    if context is None:
        return servers.start_groupcoord(ctx.server_core, args)
    argv = [
        sys.executable,
        "-m",
        "coordinator.cli",
        "serve",
        "--listen",
        f"{servers.HOST}:{{port}}",
        "--data-dir",
        "{dir}",
        "--initial-rebalance-delay-ms",
        "0",
        "--session-timeout-min-ms",
        "1000",
        "--session-timeout-max-ms",
        "300000",
        "--metrics-listen",
        "",
        *args,
    ]
    server = servers._spawn("groupcoord", argv, ctx.server_core, {"PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 30
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(f"groupcoord exited:\n{server.log_tail()}")
        try:
            with (
                socket.create_connection((servers.HOST, server.port), timeout=2) as raw,
                context.wrap_socket(raw, server_hostname=servers.HOST),
            ):
                return server
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise
            time.sleep(0.05)


def _sasl_handshake(mechanism: str) -> tuple[int, int, bytes]:
    return 17, 1, wire.string(mechanism)


def _sasl_authenticate(token: bytes) -> tuple[int, int, bytes]:
    return 36, 0, wire.nbytes(token)


async def connect(port: int, context: ssl.SSLContext | None, sasl: bool) -> loadgen.Conn:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(
        loadgen.Conn,
        servers.HOST,
        port,
        ssl=context,
        server_hostname=servers.HOST if context else None,
    )
    body = await conn.request(wire.api_versions_v0(), timeout=30)
    error, _ = wire.decode_api_versions_v0(body)
    if error:
        raise loadgen.ProtocolError(f"ApiVersions error {error}")
    if sasl:
        for request in (
            _sasl_handshake("PLAIN"),
            _sasl_authenticate(f"\0{USER}\0{PASSWORD}".encode()),
        ):
            body = await conn.request(request, timeout=60)
            error = wire.Reader(body).i16()
            if error:
                raise loadgen.ProtocolError(f"SASL error {error}")
    return conn


async def connect_many(
    port: int, context: ssl.SSLContext | None, sasl: bool, n: int
) -> list[loadgen.Conn]:
    conns: list[loadgen.Conn] = []
    for first in range(0, n, 100):  # TLS handshakes and PBKDF2 checks: 100 at a time
        conns += await asyncio.gather(
            *(connect(port, context, sasl) for _ in range(min(100, n - first)))
        )
    return conns


async def grant_bench_groups(port: int, context: ssl.SSLContext) -> None:
    """As the super user: ALLOW User:bench READ on GROUP bench-* (CreateAcls v1)."""
    admin = await connect(port, context, sasl=False)
    try:
        for request in (_sasl_handshake("PLAIN"), _sasl_authenticate(b"\0admin\0admin-secret")):
            body = await admin.request(request, timeout=30)
            if wire.Reader(body).i16():
                raise loadgen.ProtocolError("admin login refused")
        creation = (
            wire.i8(3)
            + wire.string("bench-")
            + wire.i8(4)
            + wire.string(f"User:{USER}")
            + wire.string("*")
            + wire.i8(3)
            + wire.i8(3)
        )  # GROUP PREFIXED READ ALLOW
        body = await admin.request((30, 1, wire.array([creation])), timeout=30)
        reader = wire.Reader(body)
        reader.i32()  # throttle
        reader.i32()  # one result
        if reader.i16():
            raise loadgen.ProtocolError("CreateAcls refused")
    finally:
        admin.close()


async def one_mode(
    ctx: Context, mode: str, d: Path, files: tuple[Path, Path, Path], warmup: float, measure: float
) -> dict[str, float]:
    ca, cert, key = files
    context = None if mode == "plaintext" else ssl.create_default_context(cafile=str(ca))
    sasl = mode == "sasl_ssl_acl"
    server = start(ctx, mode_args(mode, d, ca, cert, key), context)
    try:
        if sasl:
            assert context is not None
            await grant_bench_groups(server.port, context)
        t0 = time.perf_counter()
        conns = await connect_many(server.port, context, sasl, HB_GROUPS * HB_PER_GROUP)
        connect_s = time.perf_counter() - t0
        try:
            members = await loadgen.form_groups(conns, HB_GROUPS, HB_PER_GROUP, deadline_s=180)
            full = await loadgen.closed_loop(members, warmup, measure, server.cpu_s)
            await asyncio.sleep(0.5)
            opened = await loadgen.open_loop(members, OPEN_RATE, warmup, measure, server.cpu_s)
            await loadgen.leave_all(members)
        finally:
            loadgen.close_all(conns)
    finally:
        server.stop()
    return {
        "rate": full.rate,
        "p99": full.pct(99),
        "cpu_us": 1e6 * full.server_cpu_s / max(full.count, 1),
        "open_p99": opened.pct(99),
        "connect_s": connect_s,
        "errors": full.errors + opened.errors,
    }


_LABELS = {"plaintext": "plaintext", "tls": "TLS", "sasl_ssl_acl": "SASL_SSL + ACLs"}


@register(
    "security",
    "heartbeats over plaintext / TLS / SASL_SSL with ACLs (1,000 members, 1,000 connections)",
    [
        *(
            m
            for mode in MODES
            for m in (
                Metric(f"sec_{mode}_rate", f"{_LABELS[mode]}: full load throughput", "hb/s"),
                Metric(f"sec_{mode}_p99", f"{_LABELS[mode]}: full load p99", "ms"),
                Metric(f"sec_{mode}_cpu_us", f"{_LABELS[mode]}: server CPU per heartbeat", "us"),
                Metric(
                    f"sec_{mode}_open_p99", f"{_LABELS[mode]}: {OPEN_RATE // 1000}k/s p99", "ms"
                ),
                Metric(f"sec_{mode}_connect_s", f"{_LABELS[mode]}: 1,000 connections set up", "s"),
            )
        ),
        Metric("sec_tls_rate_ratio", "TLS / plaintext throughput", "x"),
        Metric("sec_errors", "heartbeat errors", "count"),
    ],
    serverless=True,
)
async def security(ctx: Context, server: object) -> dict[str, float]:
    if shutil.which("openssl") is None:
        raise RuntimeError("the openssl command is needed to make the certificates")
    warmup, measure = (0.5, 2.0) if ctx.quick else (2.0, 8.0)
    rounds = 1 if ctx.quick else 2
    d = Path(tempfile.mkdtemp(prefix="bench-security-"))
    try:
        files = make_certs(d)
        best: dict[str, dict[str, float]] = {}
        errors = 0.0
        for _ in range(rounds):
            for mode in MODES:
                got = await one_mode(ctx, mode, d, files, warmup, measure)
                errors += got["errors"]
                if mode not in best or got["rate"] > best[mode]["rate"]:
                    best[mode] = got
    finally:
        shutil.rmtree(d, ignore_errors=True)
    out: dict[str, float] = {"sec_errors": errors}
    for mode, got in best.items():
        for key in ("rate", "p99", "cpu_us", "open_p99", "connect_s"):
            out[f"sec_{mode}_{key}"] = got[key]
    out["sec_tls_rate_ratio"] = best["tls"]["rate"] / best["plaintext"]["rate"]
    return out
