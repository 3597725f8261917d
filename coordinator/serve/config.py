"""Configuration: ONE declarative table of settings, from which everything else is derived.

Each `Setting` row names a value once (`session_timeout_min_ms`); from it come
- the command-line flag `--session-timeout-min-ms` (documented in `groupcoord serve --help` with
  its default and its environment variable),
- the environment variable `GROUPCOORD_SESSION_TIMEOUT_MIN_MS`,
- the TOML key `session_timeout_min_ms` (top level of the `--config FILE`; `-` may stand for `_`).

Precedence: flag > environment > file > default. A list setting (`topic`) is taken whole from the
highest source that sets it, never merged across sources.

Invariants:
- A value is converted and validated where it came from; the first bad value raises
  `ConfigError`, whose text is one line naming the setting as the user wrote it (the flag, the
  environment variable, or the key and file) and what is wrong. The CLI prints it and exits 2.
- Flags reach argparse as strings (no `type=`), so a bad number is our one-line error, not
  argparse's usage dump.
- Unknown keys in the file are errors (a typo must not be silently ignored), all reported at once,
  each with the closest known key; unknown `GROUPCOORD_*` environment variables are ignored (the
  environment is shared with other tools).

To add a knob: append a `Setting` to `SETTINGS` (and, if it relates to another, a check to
`CROSS_CHECKS`), then read it from the resolved `Settings` in coordinator/cli.py as
`settings.<name>`. The documentation's configuration reference (docs/configuration.md) is
generated from this table by `python -m coordinator.serve.config --docs docs/configuration.md`
(`make docs` runs it; tests/test_docs_site.py fails when the page is stale).
"""

from __future__ import annotations

import argparse
import difflib
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from coordinator.core.effects import CoordinatorConfig
from coordinator.core.share.values import SharePartitionConfig
from coordinator.serve.addresses import parse_host_port, parse_upstream

Kind = Literal["str", "int", "bool", "list"]
Value = str | int | bool | tuple[str, ...] | None
Source = Literal["default", "file", "env", "flag"]

ENV_PREFIX = "GROUPCOORD_"
CONFIG_ENV = "GROUPCOORD_CONFIG"


class ConfigError(ValueError):
    """A bad setting. `str()` is the one line the CLI prints."""


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    kind: Kind
    default: Value
    help: str
    check: Callable[[Any], None] | None = None  # raises ValueError(reason) on a bad value
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    default_text: str | None = None  # how --help shows a default the raw value does not explain

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def key(self) -> str:
        return self.name

    def shown_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if isinstance(self.default, tuple):
            return "none" if not self.default else ",".join(self.default)
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        return repr(self.default) if self.default == "" else str(self.default)


# -- validators: each raises ValueError with the reason, the caller adds the setting's name ------


def at_least(low: int) -> Callable[[int], None]:
    def check(value: int) -> None:
        if value < low:
            raise ValueError(f"must be >= {low}, got {value}")

    return check


def between(low: int, high: int) -> Callable[[int], None]:
    def check(value: int) -> None:
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, got {value}")

    return check


def host_port(value: str) -> None:
    parse_host_port(value)


def host_port_or_off(value: str) -> None:
    if value:
        parse_host_port(value)


def _nonempty(value: str) -> None:
    if not value:
        raise ValueError("must not be empty")


def _fsync_policy(value: str) -> None:
    from storage.disk import parse_policy

    parse_policy(value)


def _topics(value: tuple[str, ...]) -> None:
    from coordinator.core.topics import parse_topic_spec

    seen: set[str] = set()
    for spec in value:
        name, _ = parse_topic_spec(spec)
        if name in seen:
            raise ValueError(f"topic {name!r} declared twice")
        seen.add(name)


def _upstream(value: str) -> None:
    if value:
        parse_upstream(value)


def _sasl_mechanisms(value: str) -> None:
    from coordinator.security.sasl import MECHANISMS

    given = [m.strip() for m in value.split(",") if m.strip()]
    unknown = [m for m in given if m not in MECHANISMS]
    if unknown or not given:
        raise ValueError(
            f"unknown SASL mechanism {', '.join(unknown) or '(none given)'}: "
            f"choose from {', '.join(MECHANISMS)}"
        )


def _not_empty(value: str) -> None:
    if not value:
        raise ValueError("must not be empty")


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _routable_host(value: str) -> None:
    # Kafka refuses the same in advertised.listeners ("the nonroutable meta-address"): a client
    # told to connect to 0.0.0.0 reaches only its own host.
    if value.strip("[]") in ("0.0.0.0", "::", ""):
        raise ValueError(
            f"{value!r} is no address a client can connect to; give the host name "
            "or address clients reach this server at"
        )


def _log_level(value: str) -> None:
    if value.upper() not in _LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}, got {value!r}")


# -- the table ----------------------------------------------------------------------------------
# Defaults follow Kafka's broker defaults (docs/protocol.md §14) where Kafka has the knob.

SETTINGS: list[Setting] = [
    Setting("listen", "str", "127.0.0.1:9092", "HOST:PORT to accept Kafka clients on", host_port,
            metavar="HOST:PORT"),
    Setting("advertised_host", "str", None, "host put in Metadata/FindCoordinator answers",
            _routable_host, metavar="HOST",
            default_text="the listen host; this machine's host name for a wildcard listen"),
    Setting("data_dir", "str", "./data", "directory of the group log", _not_empty, metavar="DIR"),
    Setting("fsync", "str", "always",
            "'always' (a reply waits for the fsync of its records; concurrent writes share one) "
            "or 'interval:<ms>' (a reply waits for the OS write; fsync within <ms>)",
            _fsync_policy, metavar="POLICY"),
    Setting("topic", "list", (), "declare a topic NAME:PARTITIONS (flag repeatable; env "
            "comma-separated; TOML array)", _topics, metavar="NAME:PARTITIONS"),
    Setting("session_timeout_min_ms", "int", 6_000, "group.min.session.timeout.ms", at_least(1),
            metavar="MS"),
    Setting("session_timeout_max_ms", "int", 1_800_000, "group.max.session.timeout.ms",
            at_least(1), metavar="MS"),
    Setting("initial_rebalance_delay_ms", "int", 3_000, "group.initial.rebalance.delay.ms",
            at_least(0), metavar="MS"),
    Setting("max_group_size", "int", 2**31 - 1, "group.max.size", at_least(1), metavar="N"),
    # KIP-848 consumer groups (issue 23): the server owns their session and heartbeat interval.
    Setting("consumer_session_timeout_ms", "int", 45_000,
            "group.consumer.session.timeout.ms (KIP-848 consumer groups)", at_least(1),
            metavar="MS"),
    Setting("consumer_heartbeat_interval_ms", "int", 5_000,
            "group.consumer.heartbeat.interval.ms (KIP-848 consumer groups)", at_least(1),
            metavar="MS"),
    # Kafka 4.3's default is 1000 ms; ours is shorter because the target is computed inline by a
    # timer, and a group forming in a burst is then assigned within one short interval.
    Setting("consumer_assignment_interval_ms", "int", 100,
            "group.consumer.assignment.interval.ms (KIP-848 consumer groups, KIP-1263): the "
            "target assignment is computed at most once per interval; 0 = on every change",
            at_least(0), metavar="MS"),
    # KIP-932 share groups (Kafka 4.4's broker defaults and bounds).
    Setting("share_session_timeout_ms", "int", 45_000,
            "group.share.session.timeout.ms (KIP-932 share groups)", at_least(1), metavar="MS"),
    Setting("share_heartbeat_interval_ms", "int", 5_000,
            "group.share.heartbeat.interval.ms (KIP-932 share groups)", at_least(1),
            metavar="MS"),
    Setting("share_max_size", "int", 200, "group.share.max.size: members per share group",
            between(1, 1000), metavar="N"),
    Setting("share_record_lock_duration_ms", "int", 30_000,
            "group.share.record.lock.duration.ms: how long a share consumer holds the records it "
            "fetched before they are delivered again", between(1000, 3_600_000), metavar="MS"),
    Setting("share_delivery_count_limit", "int", 5,
            "group.share.delivery.count.limit: deliveries of a record before it is archived",
            between(2, 10), metavar="N"),
    Setting("share_partition_max_record_locks", "int", 2000,
            "group.share.partition.max.record.locks: records in flight per share partition",
            between(100, 10_000), metavar="N"),
    Setting("consumer_migration_policy", "str", "bidirectional",
            "group.consumer.migration.policy: online upgrade of a non-empty classic group to a "
            "consumer group and downgrade back", choices=("bidirectional", "upgrade", "downgrade",
                                                          "disabled")),
    Setting("max_frame_bytes", "int", 100 * 1024 * 1024,
            "largest request (socket.request.max.bytes); a larger one closes the connection",
            at_least(64), metavar="BYTES"),
    Setting("offsets_retention_minutes", "int", 10_080,
            "offsets.retention.minutes: committed offsets of an empty group expire after this",
            at_least(1), metavar="MIN"),
    Setting("offsets_retention_check_interval_ms", "int", 600_000,
            "offsets.retention.check.interval.ms", at_least(1), metavar="MS"),
    Setting("history", "bool", True,
            "record group history (rebalances, members, commits) in DATA_DIR/history (a "
            "sidecar fleet: on the upstream's --history-topic) for `groupcoord audit`"),
    Setting("history_retention_ms", "int", 7 * 24 * 3_600_000,
            "delete history segments last written longer ago than this", at_least(1),
            metavar="MS"),
    Setting("history_retention_bytes", "int", 1 << 30,
            "keep the history log under this size (oldest segments go first)", at_least(4096),
            metavar="BYTES"),
    Setting("history_segment_bytes", "int", 16 << 20,
            "history segment size (at most a quarter of the retention size)", at_least(4096),
            metavar="BYTES"),
    Setting("history_topic", "str", "__groupcoord_history",
            "sidecar fleet: the upstream topic the history goes to (created if missing, with "
            "the history's retention; keyed by group id)", _nonempty, metavar="TOPIC"),
    Setting("history_topic_partitions", "int", 10,
            "sidecar fleet: the history topic's partitions when groupcoord creates it (the "
            "audit reads them in parallel)", at_least(1), metavar="N"),
    Setting("topic_hash", "str", "murmur3", "hash of topic metadata used to detect changes",
            choices=("murmur3", "xxh3")),
    Setting("upstream", "str", "",
            "sidecar mode: the upstream Kafka-compatible cluster's bootstrap brokers; produce, "
            "fetch and all but the group APIs are forwarded there ('' = standalone)",
            _upstream, metavar="HOST:PORT[,HOST:PORT...]", default_text="off"),
    Setting("broker_port_base", "int", 0,
            "sidecar mode: clients reach upstream broker N on local port BASE+N "
            "(0 = an ephemeral port per broker)", at_least(0), metavar="PORT"),
    Setting("upstream_refresh_ms", "int", 2_000,
            "sidecar mode: how often topic metadata is re-read from upstream", at_least(10),
            metavar="MS"),
    Setting("upstream_topic_delete_after_ms", "int", 60_000,
            "sidecar mode: a topic absent from the upstream's metadata is deleted, with its "
            "committed offsets, only after it has been absent this long (a DeleteTopics passing "
            "through, or a new topic id, deletes at once)", at_least(0), metavar="MS"),
    Setting("lag_interval_ms", "int", 10_000,
            "sidecar mode with --metrics-per-group: how often consumer lag is measured upstream",
            at_least(100), metavar="MS"),
    Setting("state", "str", "upstream",
            "sidecar mode: where group state lives: 'upstream' (a compacted topic on the "
            "upstream cluster; any number of sidecars act as one coordinator) or 'local' "
            "(DATA_DIR; a single sidecar only)",
            choices=("upstream", "local")),
    Setting("state_topic", "str", "__groupcoord_state",
            "sidecar fleet: the compacted topic holding group state", _nonempty,
            metavar="TOPIC"),
    Setting("state_topic_partitions", "int", 50,
            "sidecar fleet: the state topic's partitions when groupcoord creates it "
            "(an existing topic's count wins)", at_least(1), metavar="N"),
    Setting("state_topic_replication_factor", "int", -1,
            "sidecar fleet: the state and history topics' replication factor at creation "
            "(-1 = 3, or the number of brokers if fewer)", at_least(-1), metavar="N"),
    Setting("state_topic_min_insync_replicas", "int", 0,
            "sidecar fleet: the state and history topics' min.insync.replicas at creation "
            "(0 = 2 when the replication factor is 3 or more, else the cluster's default); "
            "writes use acks=all", at_least(0), metavar="N"),
    Setting("fleet_listen", "str", "",
            "sidecar fleet: HOST:PORT where the other members forward requests for the "
            "groups this member owns", host_port_or_off, metavar="HOST:PORT",
            default_text="port 9094 on the --fleet-advertise host, else on the --listen host"),
    Setting("fleet_advertise", "str", "",
            "sidecar fleet: HOST:PORT the other members reach --fleet-listen at (default: "
            "this host's address and the listen port; in Kubernetes the pod IP)",
            host_port_or_off, metavar="HOST:PORT", default_text="this host"),
    Setting("fleet_group", "str", "groupcoord-fleet",
            "sidecar fleet: the upstream consumer group the members form to share the state "
            "partitions (one per fleet)", _nonempty, metavar="GROUP"),
    # 6 s: the members form a classic consumer group on the upstream, and a stock Kafka refuses
    # a session below its group.min.session.timeout.ms (6000 by default) with
    # INVALID_SESSION_TIMEOUT; 4 s, the former default, never formed a fleet there.
    Setting("fleet_session_timeout_ms", "int", 6_000,
            "sidecar fleet: a member silent this long loses its state partitions to the others "
            "(at least the upstream's group.min.session.timeout.ms)",
            at_least(1_000), metavar="MS"),
    Setting("fleet_ssl_cafile", "str", "",
            "sidecar fleet with an SSL/SASL_SSL listener: the CAs the members' certificates are "
            "verified against; the fleet listener is then mutual TLS (each member presents "
            "--ssl-certfile) and takes only this member's own certificate's principal or one "
            "allowed CLUSTER_ACTION", metavar="FILE", default_text="--ssl-cafile"),
    Setting("security_protocol", "str", "PLAINTEXT",
            "the Kafka listener's security, as Kafka's listener security protocols",
            choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    Setting("ssl_certfile", "str", "", "SSL/SASL_SSL: the listener's certificate (PEM; with its "
            "chain)", metavar="FILE"),
    Setting("ssl_keyfile", "str", "", "SSL/SASL_SSL: the certificate's private key (PEM)",
            metavar="FILE"),
    Setting("ssl_cafile", "str", "", "SSL/SASL_SSL: when set, client certificates are required "
            "and verified against these CAs (mTLS)", metavar="FILE"),
    Setting("sasl_mechanisms", "str", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "SASL_*: the mechanisms offered (comma list)", _sasl_mechanisms, metavar="LIST"),
    Setting("sasl_users_file", "str", "", "SASL_*: a file of user:password lines that seed the "
            "users' PLAIN and SCRAM credentials at start-up (kept salted, in memory)",
            metavar="FILE"),
    Setting("sasl_session_lifetime_ms", "int", 0,
            "SASL_*: connections.max.reauth.ms: clients re-authenticate within this (KIP-368); "
            "0 = sessions do not expire", at_least(0), metavar="MS"),
    Setting("authorizer", "str", "none",
            "'acl': authorize every request with Kafka's ACLs (CreateAcls/DescribeAcls/"
            "DeleteAcls); 'none': everything is allowed, as Kafka without an authorizer",
            choices=("none", "acl")),
    Setting("super_users", "str", "", "principals allowed everything, 'User:admin;User:ops'",
            metavar="PRINCIPALS"),
    Setting("allow_everyone_if_no_acl_found", "bool", False,
            "with --authorizer acl: allow a request on a resource no ACL names "
            "(allow.everyone.if.no.acl.found)"),
    Setting("metrics_listen", "str", "127.0.0.1:9108",
            "HOST:PORT for /metrics, /healthz, /readyz and the status page ('' = off)",
            host_port_or_off, metavar="HOST:PORT"),
    Setting("upstream_security_protocol", "str", "PLAINTEXT",
            "sidecar mode: the upstream cluster's security protocol (every connection "
            "groupcoord opens there: forwarded traffic, refreshes, the fleet's clients)",
            choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    Setting("upstream_sasl_mechanism", "str", "PLAIN", "sidecar mode, SASL_*: the mechanism",
            choices=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
    Setting("upstream_sasl_username", "str", "", "sidecar mode, SASL_*: the user groupcoord "
            "authenticates as (it needs the ACLs of everything it fronts)", metavar="USER"),
    Setting("upstream_sasl_password", "str", "", "sidecar mode, SASL_*: its password (prefer "
            "the env variable or the TOML file to the flag)", metavar="PASSWORD",
            default_text="none"),
    Setting("upstream_ssl_cafile", "str", "", "sidecar mode, SSL/SASL_SSL: the CAs to verify "
            "the upstream's certificates with ('' = the system's)", metavar="FILE"),
    Setting("metrics_tls", "bool", False,
            "serve --metrics-listen over HTTPS with --ssl-certfile/--ssl-keyfile"),
    Setting("metrics_per_group", "bool", False,
            "export per-group series (group ids are unbounded: off by default)"),
    Setting("shutdown_timeout_ms", "int", 10_000,
            "on SIGTERM, how long to wait for in-flight work before exiting anyway",
            at_least(0), metavar="MS"),
    Setting("log_level", "str", "INFO", "DEBUG, INFO, WARNING or ERROR", _log_level,
            metavar="LEVEL"),
    Setting("log_format", "str", "plain", "stderr log lines: plain text or one JSON object each",
            choices=("plain", "json")),
]  # fmt: skip


def _session_bounds(s: Settings) -> None:
    if s.session_timeout_max_ms < s.session_timeout_min_ms:
        raise s.error(
            "session_timeout_max_ms",
            f"must be >= session_timeout_min_ms ({s.session_timeout_min_ms}), "
            f"got {s.session_timeout_max_ms}",
        )


def _tls_files(s: Settings) -> None:
    if s.security_protocol in ("SSL", "SASL_SSL") or s.metrics_tls:
        for name in ("ssl_certfile", "ssl_keyfile"):
            if not s[name]:
                why = "metrics_tls" if s.metrics_tls else f"security_protocol {s.security_protocol}"
                raise s.error(name, f"is required with {why}")


def _fleet_tls(s: Settings) -> None:
    """A secured listener in a fleet: members authenticate each other by certificate (mutual TLS
    on the fleet listener, coordinator.sidecar.fleet_tls), so they need TLS and a CA."""
    if not s.upstream or s.state != "upstream":
        return
    if s.security_protocol == "PLAINTEXT" and s.authorizer == "acl":
        # The fleet listener of a PLAINTEXT listener trusts whoever reaches it, and a request it
        # forwards was judged by the member that took it: anyone reaching it would skip the ACLs.
        raise s.error(
            "authorizer",
            "acl in a sidecar fleet needs a mutual-TLS fleet listener, which comes with "
            "security_protocol SSL or SASL_SSL: a plaintext fleet listener would let whoever "
            "reaches it skip the ACLs (or use --state local)",
        )
    if s.security_protocol == "PLAINTEXT":
        return
    if s.security_protocol == "SASL_PLAINTEXT":
        raise s.error(
            "security_protocol",
            "SASL_PLAINTEXT cannot secure a sidecar fleet: its members authenticate each other "
            "by certificate over TLS on the fleet listener; use SASL_SSL (or --state local)",
        )
    if not s.fleet_ssl_cafile and not s.ssl_cafile:
        raise s.error(
            "fleet_ssl_cafile",
            f"is required with security_protocol {s.security_protocol} in a sidecar fleet (or "
            "ssl_cafile): the CAs the members' certificates are verified against",
        )


def _upstream_sasl(s: Settings) -> None:
    if s.upstream_security_protocol.startswith("SASL_") and not s.upstream_sasl_username:
        raise s.error(
            "upstream_sasl_username",
            f"is required with upstream_security_protocol {s.upstream_security_protocol}",
        )


CROSS_CHECKS: list[Callable[[Settings], None]] = [
    _session_bounds,
    _tls_files,
    _upstream_sasl,
    _fleet_tls,
]


# -- resolution ---------------------------------------------------------------------------------


class Settings:
    """Resolved values (`settings.listen`) and where each came from (`settings.origin(name)`)."""

    def __init__(self, table: Sequence[Setting]) -> None:
        self._table = {s.name: s for s in table}
        self._values: dict[str, Value] = {s.name: s.default for s in table}
        self._sources: dict[str, Source] = dict.fromkeys(self._values, "default")
        self.config_file: str | None = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not a setting; also keeps copy/pickle from recursing
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name: str) -> Value:
        return self._values[name]

    def set(self, name: str, value: Value, source: Source) -> None:
        self._values[name] = value
        self._sources[name] = source

    def source(self, name: str) -> Source:
        return self._sources[name]

    def origin(self, name: str) -> str:
        """The setting as the user wrote it: '--listen', 'GROUPCOORD_LISTEN', 'listen in F'."""
        setting = self._table[name]
        match self._sources[name]:
            case "flag":
                return setting.flag
            case "env":
                return setting.env
            case "file":
                return f"{setting.key} in {self.config_file}"
            case _:
                return f"{setting.name} (default)"

    def error(self, name: str, reason: str) -> ConfigError:
        return ConfigError(f"{self.origin(name)}: {reason}")

    def names(self) -> frozenset[str]:
        return frozenset(self._table)

    def items(self) -> list[tuple[Setting, Value, Source]]:
        return [(s, self._values[s.name], self._sources[s.name]) for s in self._table.values()]


def coordinator_config(settings: Settings) -> CoordinatorConfig:
    """The core's configuration, from the settings table: every CoordinatorConfig field that is a
    setting of the same name, plus offsets_retention_ms (the setting is Kafka's
    offsets.retention.minutes). Fields that are no setting keep the core's default (Kafka's
    constants, e.g. new_member_join_timeout_ms). A test checks the defaults agree."""
    values: dict[str, Any] = {
        f.name: settings[f.name] for f in fields(CoordinatorConfig) if f.name in settings.names()
    }
    values["offsets_retention_ms"] = int(settings.offsets_retention_minutes) * 60_000
    values["share_partition"] = SharePartitionConfig(
        record_lock_duration_ms=int(settings.share_record_lock_duration_ms),
        delivery_count_limit=int(settings.share_delivery_count_limit),
        max_record_locks=int(settings.share_partition_max_record_locks),
    )
    return CoordinatorConfig(**values)


def add_arguments(parser: argparse.ArgumentParser, table: Sequence[Setting] = SETTINGS) -> None:
    """One flag per setting, plus --config. Defaults are SUPPRESS so a flag not given is absent
    from the namespace and lower-precedence sources show through."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=f"TOML file of settings (keys as below, without '--'; env {CONFIG_ENV})",
    )
    for s in table:
        text = f"{s.help} (default: {s.shown_default()}; env {s.env})".replace("%", "%%")
        if s.kind == "bool":
            parser.add_argument(
                s.flag,
                dest=s.name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=text,
            )
        elif s.kind == "list":
            parser.add_argument(
                s.flag,
                dest=s.name,
                action="append",
                metavar=s.metavar,
                default=argparse.SUPPRESS,
                help=text,
            )
        else:
            parser.add_argument(
                s.flag,
                dest=s.name,
                metavar=s.metavar or ("{" + ",".join(s.choices) + "}" if s.choices else None),
                default=argparse.SUPPRESS,
                help=text,
            )


def _from_string(s: Setting, raw: str) -> Value:
    """A flag's or an environment variable's text -> the setting's type."""
    match s.kind:
        case "str":
            return raw
        case "int":
            try:
                return int(raw.replace("_", ""))
            except ValueError:
                raise ValueError(f"expected an integer, got {raw!r}") from None
        case "bool":
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"expected true or false, got {raw!r}")
        case "list":
            return tuple(part.strip() for part in raw.split(",") if part.strip())


def _from_toml(s: Setting, raw: object) -> Value:
    """A TOML value -> the setting's type; TOML is typed, so the type must already match."""
    match s.kind:
        case "str":
            if isinstance(raw, str):
                return raw
            raise ValueError(f"expected a string, got {raw!r}")
        case "int":
            if isinstance(raw, int) and not isinstance(raw, bool):
                return raw
            raise ValueError(f"expected an integer, got {raw!r}")
        case "bool":
            if isinstance(raw, bool):
                return raw
            raise ValueError(f"expected true or false, got {raw!r}")
        case "list":
            if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
                return tuple(raw)
            raise ValueError(f"expected an array of strings, got {raw!r}")


def _validate(s: Setting, value: Value) -> None:
    if value is None:
        return
    if s.choices and value not in s.choices:
        raise ValueError(f"must be one of {', '.join(s.choices)}, got {value!r}")
    if s.check is not None:
        s.check(value)


def read_file(path: str) -> dict[str, object]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: not valid TOML: {exc}") from None
    return {key.replace("-", "_"): value for key, value in data.items()}


def unknown_key(key: str, path: object, table: Sequence[Setting] = SETTINGS) -> str:
    """`key in FILE: unknown setting`, with the closest known key when one is close enough."""
    close = difflib.get_close_matches(key, [s.key for s in table], n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"{key} in {path}: unknown setting{hint}"


def resolve(
    args: argparse.Namespace | Mapping[str, object],
    environ: Mapping[str, str] | None = None,
    table: Sequence[Setting] = SETTINGS,
) -> Settings:
    """Defaults, then the file, then the environment, then flags; validate each value where it
    came from, then the cross checks. Raises ConfigError (one line) on the first bad value."""
    flags = dict(vars(args)) if isinstance(args, argparse.Namespace) else dict(args)
    env = os.environ if environ is None else environ
    settings = Settings(table)

    path = flags.get("config") or env.get(CONFIG_ENV) or None
    if path is not None:
        settings.config_file = str(path)
        values = read_file(str(path))
        unknown = [key for key in values if key not in settings._table]
        if unknown:  # every one at once, each with the known key it most looks like
            raise ConfigError("; ".join(unknown_key(key, path, table) for key in unknown))
        for key, raw in values.items():
            setting = settings._table[key]
            try:
                settings.set(key, _from_toml(setting, raw), "file")
            except ValueError as exc:
                raise ConfigError(f"{key} in {path}: {exc}") from None

    for s in table:
        if s.env in env:
            try:
                settings.set(s.name, _from_string(s, env[s.env]), "env")
            except ValueError as exc:
                raise ConfigError(f"{s.env}: {exc}") from None
        if s.name in flags:
            given = flags[s.name]
            try:
                if isinstance(given, bool):
                    value: Value = given
                elif isinstance(given, list):
                    value = tuple(str(x) for x in given)
                else:
                    value = _from_string(s, str(given))
            except ValueError as exc:
                raise ConfigError(f"{s.flag}: {exc}") from None
            settings.set(s.name, value, "flag")

    for s in table:
        try:
            _validate(s, settings[s.name])
        except ValueError as exc:
            raise settings.error(s.name, str(exc)) from None
    for cross in CROSS_CHECKS:
        cross(settings)
    return settings


def render_toml(settings: Settings) -> str:
    """The resolved settings as a config file, each line commented with its source."""
    lines = []
    for s, current, source in settings.items():
        if current is None:
            lines.append(f"# {s.key} = (unset: {s.shown_default()})")
            continue
        if isinstance(current, bool):
            text = "true" if current else "false"
        elif isinstance(current, int):
            text = str(current)
        elif isinstance(current, tuple):
            text = "[" + ", ".join(_toml_string(v) for v in current) + "]"
        else:
            text = _toml_string(current)
        lines.append(f"{s.key} = {text}  # {source}")
    return "\n".join(lines)


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


_KIND_TEXT = {"str": "string", "int": "integer", "bool": "switch", "list": "list"}


def type_text(s: Setting) -> str:
    """The setting's type as the reference shows it: its choices, or its kind."""
    if s.choices:
        return "one of " + ", ".join(f"`{c}`" for c in s.choices)
    return _KIND_TEXT[s.kind]


def _cell(text: str) -> str:
    """Plain text as a Markdown table cell: no column break, no HTML tag (`<ms>`)."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def markdown_table(table: Sequence[Setting] = SETTINGS) -> str:
    rows = [
        "| flag | env / TOML key | type | default | meaning |",
        "|---|---|---|---|---|",
    ]
    for s in table:
        flag = s.flag + (f" {s.metavar}" if s.metavar else "")
        if s.kind == "bool":
            flag += f"`, `--no-{s.flag[2:]}"
        meaning, default = _cell(s.help), _cell(s.shown_default())
        rows.append(
            f"| `{flag}` | `{s.env}` / `{s.key}` | {type_text(s)} | {default} | {meaning} |"
        )
    return "\n".join(rows)


DOCS_BEGIN = (
    "<!-- settings table: generated by "
    "`python -m coordinator.serve.config --docs docs/configuration.md` -->"
)
DOCS_END = "<!-- end of settings table -->"


def render_doc(text: str) -> str:
    """`text` with the table between DOCS_BEGIN and DOCS_END replaced by the current one."""
    start = text.index(DOCS_BEGIN) + len(DOCS_BEGIN)
    end = text.index(DOCS_END)
    return text[:start] + "\n" + markdown_table() + "\n" + text[end:]


def update_doc(path: str) -> bool:
    """Regenerate the table in the page at `path`; True if the file changed."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    new = render_doc(text)
    if new == text:
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return True


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--docs"]:
        changed = update_doc(sys.argv[2])
        print(f"{sys.argv[2]}: {'updated' if changed else 'already up to date'}")
    else:
        print(markdown_table())
