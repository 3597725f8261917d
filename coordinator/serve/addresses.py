"""Parsing the addresses users write: 'HOST:PORT' and the upstream list 'HOST:PORT,HOST:PORT'.

A leaf module (standard library only), so the settings table, the HTTP endpoint, the sidecar and
the CLIs can all use it without importing each other.
"""

from __future__ import annotations

import logging
import socket

log = logging.getLogger("groupcoord.server")

WILDCARDS = ("0.0.0.0", "::", "")


def advertised_host(configured: str | None, bound_host: str) -> str:
    """The host put in Metadata and FindCoordinator answers: --advertised-host, else the bound
    host. A wildcard bind is no address a client can use: then this machine's host name, not
    getfqdn() (often "localhost" through /etc/hosts, which a client in another container takes
    for itself), said once in the log (Kafka's default listener host is chosen silently)."""
    host = configured or bound_host
    if host not in WILDCARDS:
        return host
    name = socket.gethostname()
    log.warning(
        "listening on all interfaces (%s) with no --advertised-host: advertising this machine's "
        "host name %r; set --advertised-host to the name clients reach",
        bound_host,
        name,
    )
    return name


def parse_host_port(value: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); '[::1]:9092' -> ('::1', 9092). Raises ValueError."""
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"port must be an integer, got {port!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"port must be 0-65535, got {number}")
    return host.strip("[]"), number


def parse_upstream(value: str) -> list[tuple[str, int]]:
    """'b1:9092,b2:9092' -> [('b1', 9092), ('b2', 9092)]. Raises ValueError."""
    out = [parse_host_port(part.strip()) for part in value.split(",") if part.strip()]
    if not out:
        raise ValueError("expected HOST:PORT[,HOST:PORT...]")
    if any(port == 0 for _, port in out):
        raise ValueError("an upstream port cannot be 0")
    return out
