"""coordinator.tools.command_config: the properties Kafka's tools take, read as Kafka reads them,
and every value we cannot honour refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.tools.command_config import CommandConfigError, load, parse_properties

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="ops" password="p\\"w";')


def test_properties_lines_comments_separators_and_continuations() -> None:
    text = ("# a comment\n! another\n\nsecurity.protocol = SASL_SSL\nsasl.mechanism: PLAIN\n"
            "sasl.jaas.config=a \\\n    b\nempty=\n")
    assert parse_properties(text) == {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                      "sasl.jaas.config": "a b", "empty": ""}


def write(tmp_path: Path, **props: str) -> str:
    path = tmp_path / "client.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


def test_a_sasl_plaintext_config_and_what_is_ignored(tmp_path: Path) -> None:
    warnings: list[str] = []
    security = load(write(tmp_path, **{"security.protocol": "sasl_plaintext",
                                       "sasl.mechanism": "SCRAM-SHA-512",
                                       "sasl.jaas.config": JAAS, "client.id": "x"}), warnings)
    assert (security.protocol, security.mechanism, security.username, security.password) == \
        ("SASL_PLAINTEXT", "SCRAM-SHA-512", "ops", 'p"w')
    assert security.ssl_context is None
    assert warnings == ["--command-config: ignoring client.id"]


def test_plaintext_by_default(tmp_path: Path) -> None:
    assert load(write(tmp_path)).protocol == "PLAINTEXT"


@pytest.mark.parametrize(("props", "says"), [
    ({"security.protocol": "SASL_SSLX"}, "security.protocol"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.jaas.config": JAAS}, "GSSAPI"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "username"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/x.jks"}, "PEM"),
    ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "CA file"),
])
def test_what_cannot_be_honoured_is_refused(tmp_path: Path, props: dict[str, str],
                                            says: str) -> None:
    with pytest.raises(CommandConfigError, match=says):
        load(write(tmp_path, **props))


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CommandConfigError, match="--command-config"):
        load(str(tmp_path / "missing.properties"))
