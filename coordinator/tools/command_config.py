"""`groupcoord groups --command-config FILE`: the client properties file Kafka's own tools take
(kafka-consumer-groups.sh --command-config), for a secured groupcoord or Kafka cluster.

Read: `security.protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), `sasl.mechanism` (PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512), `sasl.jaas.config` (PlainLoginModule or ScramLoginModule with
`username="..."` and `password="..."`), and the CA to verify the brokers with:
`ssl.truststore.location` with `ssl.truststore.type=PEM` (a JKS or PKCS12 store cannot be read
here: Java's format), or librdkafka's `ssl.ca.location`. Without one, the system's CAs verify.
`ssl.endpoint.identification.algorithm=` (empty) turns host-name checking off, as in Kafka.
Other properties are ignored, named once on stderr. A file that cannot be read, or a value we
cannot honour, is an error in one line (exit 2).
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path

from coordinator.security.client import MECHANISMS, PLAINTEXT, PROTOCOLS, ClientSecurity

_JAAS_FIELD = re.compile(r'\b(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_USED = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "ssl.truststore.location",
    "ssl.truststore.type", "ssl.ca.location", "ssl.endpoint.identification.algorithm",
})  # fmt: skip


class CommandConfigError(Exception):
    """The file or one of its values, in one line."""


def parse_properties(text: str) -> dict[str, str]:
    """Java's .properties as Kafka's tools write them: `key=value` or `key: value` lines, `#` and
    `!` comments, a trailing backslash continuing the line."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)", line)
        if match is None:
            out[line] = ""
        else:
            out[match.group(1)] = match.group(2)
    return out


def load(path: str, warn: list[str] | None = None) -> ClientSecurity:
    try:
        props = parse_properties(Path(path).read_text())
    except OSError as exc:
        raise CommandConfigError(f"--command-config {path}: {exc.strerror or exc}") from None
    ignored = sorted(set(props) - _USED)
    if ignored and warn is not None:
        warn.append(f"--command-config: ignoring {', '.join(ignored)}")
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise CommandConfigError(f"security.protocol {protocol!r}: not one of {PROTOCOLS}")
    if protocol == "PLAINTEXT":
        return PLAINTEXT
    username = password = ""
    mechanism = props.get("sasl.mechanism", "GSSAPI" if protocol.startswith("SASL_") else "")
    if protocol.startswith("SASL_"):
        if mechanism not in MECHANISMS:
            raise CommandConfigError(f"sasl.mechanism {mechanism!r}: not one of {MECHANISMS}")
        fields = dict(_JAAS_FIELD.findall(props.get("sasl.jaas.config", "")))
        if "username" not in fields or "password" not in fields:
            raise CommandConfigError('sasl.jaas.config needs username="..." and password="..."')
        username = re.sub(r"\\(.)", r"\1", fields["username"])
        password = re.sub(r"\\(.)", r"\1", fields["password"])
    cafile = props.get("ssl.ca.location") or None
    if protocol in ("SSL", "SASL_SSL") and props.get("ssl.truststore.location"):
        if props.get("ssl.truststore.type", "JKS").upper() != "PEM":
            raise CommandConfigError(
                "ssl.truststore.type must be PEM here (a JKS/PKCS12 store is Java's format)"
            )
        cafile = props["ssl.truststore.location"]
    check_hostname = props.get("ssl.endpoint.identification.algorithm", "https") != ""
    try:
        return ClientSecurity.create(
            protocol, mechanism or "PLAIN", username, password, cafile, check_hostname
        )
    except (OSError, ssl.SSLError) as exc:
        raise CommandConfigError(f"the CA file {cafile}: {exc}") from None
