"""Parsing the addresses users write: 'HOST:PORT' and the upstream list 'HOST:PORT,HOST:PORT'.

A leaf module (standard library only), so the settings table, the HTTP endpoint, the sidecar and
the CLIs can all use it without importing each other.
"""

from __future__ import annotations


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
