"""Helpers for the issue-22 acceptance tests: a groupcoord with its listener secured, the users
and certificates it trusts, and a raw Kafka client that speaks TLS and SASL (PLAIN, SCRAM).

Every broker started here is owned by a fixture that kills it; every wait is a condition with a
deadline (tests.support.realclients.wait_until).
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import realclients as rc
from tests.support.sidecar_util import HOST, RawClient, kio
from tests.support.tls import Certs

# user -> password, seeded by --sasl-users-file. admin is the super user.
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret",
         "carol": "carol-secret"}
SUPER_USER = "User:admin"
TOPIC = "t"
PARTITIONS = rc.PARTITIONS


def write_users(path: Path, users: dict[str, str] = USERS) -> Path:
    path.write_text("".join(f"{u}:{p}\n" for u, p in users.items()))
    return path


def security_args(protocol: str, certs: Certs | None = None, users_file: Path | None = None,
                  *, authorizer: bool = False, mtls: bool = False,
                  extra: tuple[str, ...] = ()) -> list[str]:
    """`groupcoord serve` flags for a secured listener."""
    args = ["--security-protocol", protocol]
    if protocol in ("SSL", "SASL_SSL"):
        assert certs is not None
        args += ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)]
        if mtls:
            args += ["--ssl-cafile", str(certs.ca)]
    if users_file is not None:
        args += ["--sasl-users-file", str(users_file)]
    if authorizer:
        args += ["--authorizer", "acl", "--super-users", SUPER_USER]
    return args + list(extra)


def start(tmp: Path, peers: Path, args: list[str], data_dir: Path | None = None,
          port: int | None = None) -> rc.Broker:
    """groupcoord with the test defaults (rc.start_broker's) and `args`; with data_dir/port, on
    those (a restart on the same log)."""
    options: dict[str, Any] = {"initial_rebalance_delay_ms": 0, "session_timeout_min_ms": 1000,
                               "session_timeout_max_ms": 300000, "metrics_listen": ""}
    if data_dir is None:
        return rc.start_broker(tmp, peers, {TOPIC: PARTITIONS}, options, args)
    assert port is not None
    log_path = tmp / f"groupcoord-{port}-restart-{time.monotonic_ns()}.log"
    cmd = rc.groupcoord_command(port, data_dir, {TOPIC: PARTITIONS}, options, args)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=rc.REPO, start_new_session=True)
    broker = rc.Broker("groupcoord", HOST, port, proc, log_path, data_dir, {TOPIC: PARTITIONS})
    rc.wait_until_sync(lambda: not broker.alive() or rc.can_connect(HOST, port), 20,
                       f"groupcoord to accept connections again on {port}")
    assert broker.alive(), broker.log_tail()
    return broker


def stop_gracefully(broker: rc.Broker, timeout: float = 20) -> None:
    """SIGTERM, then wait for the exit (a clean shutdown: the log is flushed)."""
    broker.proc.terminate()
    broker.proc.wait(timeout)


@pytest.fixture
def brokers() -> Iterator[list[rc.Broker]]:
    """A list a test appends its brokers to; each is killed at teardown."""
    started: list[rc.Broker] = []
    yield started
    for b in started:
        b.stop()


# -------------------------------------------------------------------------- a raw secure client


def client_context(certs: Certs, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """A client's TLS context trusting the test CA (and presenting `cert`, for mTLS)."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


async def connect(port: int, context: ssl.SSLContext | None = None) -> RawClient:
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(HOST, port, ssl=context,
                                server_hostname=HOST if context else None), 10)
    return RawClient(reader, writer)


async def authenticate(client: RawClient, user: str, password: str,
                       mechanism: str = "PLAIN") -> Any:
    """SaslHandshake v1 + SaslAuthenticate v2 (PLAIN, or SCRAM with scramp): the last
    SaslAuthenticate response (error_code 0 when the server accepted)."""
    handshake = await client.call(kio(17, 1, "SaslHandshakeRequest", mechanism=mechanism))
    assert handshake.error_code == 0, handshake
    if mechanism == "PLAIN":
        token = b"\0" + user.encode() + b"\0" + password.encode()
        return await client.call(kio(36, 2, "SaslAuthenticateRequest", auth_bytes=token))
    from scramp import ScramClient

    scram = ScramClient([mechanism], user, password)
    first = await client.call(kio(36, 2, "SaslAuthenticateRequest",
                                  auth_bytes=scram.get_client_first().encode()))
    if first.error_code:
        return first
    scram.set_server_first(first.auth_bytes.decode())
    final = await client.call(kio(36, 2, "SaslAuthenticateRequest",
                                  auth_bytes=scram.get_client_final().encode()))
    if final.error_code == 0:
        scram.set_server_final(final.auth_bytes.decode())  # the server proved it knows the key
    return final


async def login(port: int, user: str, context: ssl.SSLContext | None = None,
                mechanism: str = "PLAIN") -> RawClient:
    """A connection authenticated as `user` (its password from USERS)."""
    client = await connect(port, context)
    answer = await authenticate(client, user, USERS[user], mechanism)
    assert answer.error_code == 0, answer
    return client


def sasl(mechanism: str, user: str, certs: Certs | None = None,
         protocol: str = "SASL_SSL") -> dict[str, str]:
    """A driver's --security object (tests/clients/common.py)."""
    out = {"protocol": protocol, "mechanism": mechanism, "username": user,
           "password": USERS.get(user, "?")}
    if certs is not None:
        out["cafile"] = str(certs.ca)
    return out


def confluent_conf(bootstrap: str, security: dict[str, str]) -> dict[str, Any]:
    from tests.clients.confluent_driver import security_conf

    return {"bootstrap.servers": bootstrap, "log_level": 3, **security_conf(security)}
