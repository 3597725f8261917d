"""--metrics-tls: the operator's HTTP endpoint over HTTPS with the listener's certificate, which
a client that trusts the CA verifies (issue 22, item 1); plain HTTP to it gets nothing."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.security.secure_util import brokers, security_args, start
from tests.support import realclients as rc
from tests.support.tls import Certs

pytestmark = pytest.mark.clients
__all__ = ["brokers"]


def test_the_metrics_endpoint_serves_https_only(
    tmp_path: Path, peers_dir: Path, certs: Certs, brokers: list[rc.Broker]
) -> None:
    port = rc.free_port()
    args = [*security_args("SSL", certs), "--metrics-tls", "--metrics-listen", f"127.0.0.1:{port}"]
    brokers.append(start(tmp_path, peers_dir, args))
    context = ssl.create_default_context(cafile=str(certs.ca))

    def healthz() -> int:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=5,
                                    context=context) as response:  # fmt: skip
            return int(response.status)

    rc.wait_until_sync(lambda: rc.can_connect("127.0.0.1", port), 20, "the HTTPS endpoint")
    assert healthz() == 200
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=5,
                                context=context) as response:  # fmt: skip
        assert b"groupcoord_requests_total" in response.read()
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # no plain HTTP on it
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
