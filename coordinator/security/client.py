"""How one of groupcoord's own Kafka clients reaches a secured cluster (issue 22): the sidecar's
connections toward its upstream (coordinator.sidecar.upstream_clients), `groupcoord groups` and
`groupcoord audit` (--command-config: coordinator.tools.command_config), whose Spark executors
get it through the Data Source's options.

`ClientSecurity` is the settings only, plus the TLS context built from them once
(`ClientSecurity.create`); `to_options`/`from_options` carry it as strings without the context
(Spark options: the password goes under its own key, which Spark redacts from its UI and plans
by its default spark.redaction.regex). `aiokafka_options` is what aiokafka's clients take.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from typing import Any, Final

PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str = ""
    password: str = field(default="", repr=False)
    cafile: str | None = None  # None: the system's CAs
    check_hostname: bool = True
    ssl_context: ssl.SSLContext | None = None  # built from cafile when TLS (`create`)

    @classmethod
    def create(
        cls,
        protocol: str,
        mechanism: str = "PLAIN",
        username: str = "",
        password: str = "",
        cafile: str | None = None,
        check_hostname: bool = True,
    ) -> ClientSecurity:
        """With its TLS context: the chain verified against `cafile` (else the system's CAs) and,
        unless told otherwise, the broker's host name, as any Kafka client does. Raises OSError
        or ssl.SSLError for a CA file that cannot be loaded."""
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=cafile)
            context.check_hostname = check_hostname
        return cls(protocol, mechanism, username, password, cafile, check_hostname, context)

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def to_options(self) -> tuple[str, str]:
        """(everything but the password as JSON, the password)."""
        settings = {"protocol": self.protocol, "mechanism": self.mechanism,
                    "username": self.username, "cafile": self.cafile,
                    "check_hostname": self.check_hostname}  # fmt: skip
        return json.dumps(settings), self.password

    @classmethod
    def from_options(cls, settings: str, password: str) -> ClientSecurity:
        data = json.loads(settings or "{}")
        if not data:
            return PLAINTEXT
        return cls.create(
            str(data["protocol"]),
            str(data["mechanism"]),
            str(data["username"]),
            password,
            data.get("cafile"),
            bool(data.get("check_hostname", True)),
        )


PLAINTEXT: Final = ClientSecurity()


def aiokafka_options(security: ClientSecurity) -> dict[str, Any]:
    """aiokafka's keyword arguments for `security` (producers, consumers, admin clients)."""
    options: dict[str, Any] = {"security_protocol": security.protocol}
    if security.tls:
        options["ssl_context"] = security.ssl_context
    if security.sasl:
        options["sasl_mechanism"] = security.mechanism
        options["sasl_plain_username"] = security.username
        options["sasl_plain_password"] = security.password
    return options
