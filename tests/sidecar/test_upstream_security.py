"""Sidecar mode in front of a SASL_SSL upstream (issue 22, item 4).

tansu 0.6.0 cannot serve TLS (its `--cert` and `--key` flags refuse each other) and keeps users
only in its memory engine, so the upstream here is groupcoord itself, standalone, with
--security-protocol SASL_SSL: a Kafka-compatible listener that verifies SCRAM and PLAIN and
answers Metadata, ApiVersions and the topic admin APIs, which is what the sidecar's own links
need. The sidecar's links are verified TLS (the test CA) and authenticate before carrying
anything; a wrong password makes the upstream unreachable, as /readyz says."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.security.client import ClientSecurity
from coordinator.sidecar.upstream_clients import (
    client_options,
    security_from_settings,
)
from tests.support import realclients as rc
from tests.support.sidecar_util import REPO, Stack, create_topic, readyz, stack
from tests.support.tls import Certs, make_certs

pytestmark = pytest.mark.clients
__all__ = ["stack"]

USERS = "fleet:fleet-secret\n"


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[int, Certs]]:
    """groupcoord standalone with SASL_SSL (users: fleet/fleet-secret): (port, certs)."""
    certs = make_certs(tmp_path / "certs")
    users = tmp_path / "users"
    users.write_text(USERS)
    port = rc.free_port()
    log = (tmp_path / "upstream.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", "serve", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(tmp_path / "upstream-data"), "--metrics-listen", "",
         "--security-protocol", "SASL_SSL", "--ssl-certfile", str(certs.server_cert),
         "--ssl-keyfile", str(certs.server_key), "--sasl-users-file", str(users)],
        stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
    )  # fmt: skip
    try:
        rc.wait_until_sync(lambda: proc.poll() is not None or rc.can_connect("127.0.0.1", port),
                           20, "the SASL_SSL upstream to listen")  # fmt: skip
        assert proc.poll() is None, (tmp_path / "upstream.log").read_text()
        yield port, certs
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


def sasl_flags(mechanism: str, password: str, certs: Certs) -> list[str]:
    return ["--upstream-security-protocol", "SASL_SSL", "--upstream-sasl-mechanism", mechanism,
            "--upstream-sasl-username", "fleet", "--upstream-sasl-password", password,
            "--upstream-ssl-cafile", str(certs.ca)]  # fmt: skip


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
async def test_a_sidecar_reaches_a_sasl_ssl_upstream(
    stack: Stack, upstream: tuple[int, Certs], mechanism: str
) -> None:
    port, certs = upstream
    sidecar = stack.sidecar(f"127.0.0.1:{port}", *sasl_flags(mechanism, "fleet-secret", certs))
    await rc.wait_until(lambda: readyz(sidecar)[0] == 200, 20, "the sidecar to be ready",
                        explain=stack.explain)  # fmt: skip
    view = sidecar.upstream()
    assert view["state"] == "reachable" and view["brokers"] == 1, view
    # A client's request, forwarded on an authenticated TLS link: CreateTopics upstream.
    await create_topic(sidecar.bootstrap, "secured", 2)
    await rc.wait_until(lambda: "upstream topic secured has 2 partitions" in sidecar.log(), 10,
                        "the sidecar's refresh to see the topic", explain=stack.explain)


async def test_a_wrong_upstream_password_keeps_the_sidecar_unready(
    stack: Stack, upstream: tuple[int, Certs]
) -> None:
    port, certs = upstream
    sidecar = stack.sidecar(f"127.0.0.1:{port}", *sasl_flags("SCRAM-SHA-256", "wrong", certs))
    await rc.wait_until(lambda: "SASL_AUTHENTICATION_FAILED" in readyz(sidecar)[1], 20,
                        "/readyz to name the refused authentication", explain=stack.explain)
    assert readyz(sidecar)[0] == 503


def test_the_fleets_aiokafka_clients_get_the_same_security() -> None:
    class Settings:
        upstream_security_protocol = "SASL_SSL"
        upstream_sasl_mechanism = "SCRAM-SHA-512"
        upstream_sasl_username = "fleet"
        upstream_sasl_password = "pw"
        upstream_ssl_cafile = ""

    security = security_from_settings(Settings())
    options = client_options("k:9092", security)
    assert options["security_protocol"] == "SASL_SSL"
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("fleet", "pw")
    assert options["ssl_context"] is security.ssl_context is not None
    plain = client_options("k:9092", ClientSecurity())
    assert plain["security_protocol"] == "PLAINTEXT"
    assert "ssl_context" not in plain and "sasl_mechanism" not in plain
