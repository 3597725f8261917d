"""Group configs (KIP-848/932's GROUP config resource) as Kafka 4.4's GroupConfig names them, and
their record (groupcoord's own type 105).

Kafka keeps a group's dynamic configs in the KRaft metadata log (ConfigRecord, resource type
GROUP) and GroupConfigManager hands them to the coordinators. groupcoord keeps them with the
group: one record per group id holding every config set for it, written where the group's
records go (the local log, or the group's state partition in a fleet), so replay restores them.

Key   = int16 105, group id string.
Value = int16 version 0, int32 count, each: name string, value string (int16 length + UTF-8).
A tombstone: no config is set for the group any more.

Rules (GroupConfig.validate, ControllerConfigurationValidator for GROUP resources):
- an unknown name -> INVALID_CONFIG "Unknown group config name: X";
- a value that does not parse or is below GroupConfig's floor (atLeast, the enum's words)
  -> INVALID_CONFIG "Invalid value V for configuration N: ...";
- the whole config after the change: a delivery count limit of 2 to 10, and each session
  timeout above its heartbeat interval (the unset ones taking the broker's values).
Kafka 4.4 no longer refuses a value beyond the broker's group.share.min/max.* bounds: it caps the
effective value where it uses it (and logs it). Differences on purpose: groupcoord has no such
min/max settings, so it uses the group's value as set. The streams.*, DLQ and assignor configs of
Kafka 4.4's GroupConfig are not kept (groupcoord has no streams groups or DLQ, and computes
assignments inline): they answer "Unknown group config name".

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from coordinator.core.record_wire import RecordDecodeError
from coordinator.core.share.values import SharePartitionConfig

__all__ = [
    "CONFIG_DEFS",
    "GROUP_CONFIG_TYPE",
    "ConfigDef",
    "GroupConfigKey",
    "GroupConfigValue",
    "broker_defaults",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_config",
    "reset_timestamp",
    "validate",
]

GROUP_CONFIG_TYPE: Final = 105
_PREFIX: Final = struct.pack(">h", GROUP_CONFIG_TYPE)
_VERSION: Final = 0
_INT_MAX: Final = 2**31 - 1
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")
EARLIEST: Final = -2  # ListOffsets' timestamps
LATEST: Final = -1


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One GroupConfig entry: its type (DescribeConfigs' ConfigType: 1 BOOLEAN, 2 STRING, 3 INT),
    the broker setting giving its value when the group sets none and that setting's Kafka
    default, GroupConfig's floor for an INT, and a STRING's or BOOLEAN's words."""

    name: str
    config_type: int
    broker_name: str
    kafka_default: str
    at_least: int = 0
    choices: tuple[str, ...] = ()


def _int(name: str, kafka_default: int, at_least: int) -> ConfigDef:
    # Called only while the module is imported, before mutmut can switch a mutant on; the
    # table it builds is pinned by tests/core/test_pin_share_configs.py (types, names, floors).
    return ConfigDef(name, 3, f"group.{name}", str(kafka_default), at_least)  # pragma: no mutate


CONFIG_DEFS: Final[Mapping[str, ConfigDef]] = {
    d.name: d
    for d in (
        _int("consumer.session.timeout.ms", 45_000, 1),
        _int("consumer.heartbeat.interval.ms", 5_000, 1),
        _int("share.session.timeout.ms", 45_000, 1),
        _int("share.heartbeat.interval.ms", 5_000, 1),
        _int("share.record.lock.duration.ms", 30_000, 1000),
        _int("share.delivery.count.limit", 5, 2),
        _int("share.partition.max.record.locks", 2000, 100),
        ConfigDef("share.auto.offset.reset", 2, "", "latest", choices=("latest", "earliest")),
        ConfigDef("share.isolation.level", 2, "", "read_uncommitted",
                  choices=("read_committed", "read_uncommitted")),
        ConfigDef("share.renew.acknowledge.enable", 1, "", "true", choices=("true", "false")),
    )
}  # fmt: skip
# GroupConfig.validateValues' own range for the delivery count limit (Kafka 4.4).
_DELIVERY_COUNT_RANGE: Final = (2, 10)


@dataclass(frozen=True, slots=True)
class GroupConfigKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class GroupConfigValue:
    configs: tuple[tuple[str, str], ...]  # (name, value), sorted by name


def broker_defaults(
    session_ms: int, heartbeat_ms: int, share_session_ms: int, share_heartbeat_ms: int,
    partition: SharePartitionConfig,
) -> dict[str, str]:  # fmt: skip
    """Every config's value when the group sets none (Kafka: the broker's settings)."""
    return {
        "consumer.session.timeout.ms": str(session_ms),
        "consumer.heartbeat.interval.ms": str(heartbeat_ms),
        "share.session.timeout.ms": str(share_session_ms),
        "share.heartbeat.interval.ms": str(share_heartbeat_ms),
        "share.record.lock.duration.ms": str(partition.record_lock_duration_ms),
        "share.delivery.count.limit": str(partition.delivery_count_limit),
        "share.partition.max.record.locks": str(partition.max_record_locks),
        "share.auto.offset.reset": "latest",
        "share.isolation.level": "read_uncommitted",
        "share.renew.acknowledge.enable": "true" if partition.renew_enabled else "false",
    }


def _parse(d: ConfigDef, value: str) -> str | None:
    """None, or why `value` is not a valid value of `d` (Kafka's ConfigException words)."""
    head = f"Invalid value {value} for configuration {d.name}"
    if d.config_type == 3:
        try:
            number = int(value.strip())
        except ValueError:
            return f"{head}: Not a number of type INT"
        if not -(2**31) <= number <= _INT_MAX:
            return f"{head}: Not a number of type INT"
        if number < d.at_least:
            return f"{head}: Value must be at least {d.at_least}"
        return None
    word = value.strip().lower()
    if d.name == "share.auto.offset.reset":
        duration = value.strip()[len("by_duration:") :]
        if word in d.choices or (
            word.startswith("by_duration:") and _DURATION.match(duration) and duration != "P"
        ):
            return None
        return (
            f"{head}: Invalid value `{value}` for configuration {d.name}. The value must be "
            "either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
        )
    if d.config_type == 1:  # ConfigDef.parseType: true or false in any case
        return None if word in d.choices else f"{head}: Expected value to be either true or false"
    if value.strip() not in d.choices:  # ConfigDef.ValidString: the exact word (after a trim)
        return f"{head}: String must be one of: {', '.join(d.choices)}"
    return None


def validate(configs: Mapping[str, str], defaults: Mapping[str, str]) -> str | None:
    """None, or INVALID_CONFIG's message for the group's whole config `configs` (what is set
    after the change), the unset ones taking `defaults` (Kafka 4.4 then caps a value beyond the
    broker's group.*.min/max.* bounds where it uses it; groupcoord has no such bounds)."""
    for name, value in configs.items():
        d = CONFIG_DEFS.get(name)
        if d is None:
            return f"Unknown group config name: {name}"
        problem = _parse(d, value)
        if problem is not None:
            return problem
    merged = {**defaults, **configs}
    low, high = _DELIVERY_COUNT_RANGE
    if not low <= int(merged["share.delivery.count.limit"].strip()) <= high:
        return f"share.delivery.count.limit must be in the range {low} to {high} inclusive."
    for kind in ("consumer", "share"):
        session = int(merged[f"{kind}.session.timeout.ms"].strip())
        if session <= int(merged[f"{kind}.heartbeat.interval.ms"].strip()):
            return f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms"
    return None


def partition_config(
    base: SharePartitionConfig, configs: Mapping[str, str]
) -> SharePartitionConfig | None:
    """The share partitions' config of a group that set `configs`; None when it sets none of
    theirs (the broker's defaults apply)."""
    changes: dict[str, int | bool] = {}
    if "share.record.lock.duration.ms" in configs:
        changes["record_lock_duration_ms"] = int(configs["share.record.lock.duration.ms"])
    if "share.delivery.count.limit" in configs:
        changes["delivery_count_limit"] = int(configs["share.delivery.count.limit"])
    if "share.partition.max.record.locks" in configs:
        changes["max_record_locks"] = int(configs["share.partition.max.record.locks"])
    if "share.renew.acknowledge.enable" in configs:
        changes["renew_enabled"] = (
            configs["share.renew.acknowledge.enable"].strip().lower() == "true"
        )
    return replace(base, **changes) if changes else None  # type: ignore[arg-type]


def reset_timestamp(policy: str, wall_ms: int) -> int:
    """ListOffsets' timestamp for a share partition's start under share.auto.offset.reset:
    EARLIEST, LATEST, or for by_duration:<ISO 8601 duration> the wall clock that long ago (where
    no record is that recent, Kafka starts at the latest offset: the caller's fallback)."""
    word = policy.strip().lower()
    if word == "earliest":
        return EARLIEST
    match = _DURATION.match(policy.strip()[len("by_duration:") :])
    if not word.startswith("by_duration:") or match is None:
        return LATEST
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    duration_ms = int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)
    return max(0, wall_ms - duration_ms)


# -- the record ------------------------------------------------------------------------------------


def _string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def encode_key(key: GroupConfigKey) -> bytes:
    return _PREFIX + _string(key.group_id)


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    (length,) = struct.unpack_from(">h", data, pos)
    end = pos + 2 + length
    if length < 0 or end > len(data):
        raise RecordDecodeError("group config string runs past the record")
    return data[pos + 2 : end].decode(), end


def decode_key(data: bytes) -> GroupConfigKey:
    try:
        group, end = _read_string(data, 2)
    except (struct.error, UnicodeDecodeError) as exc:
        raise RecordDecodeError(f"bad group config key: {exc}") from exc
    if end != len(data):
        raise RecordDecodeError("group config key has trailing bytes")
    return GroupConfigKey(group)


def encode_value(value: GroupConfigValue) -> bytes:
    parts = [struct.pack(">hi", _VERSION, len(value.configs))]
    for name, v in value.configs:
        parts += (_string(name), _string(v))
    return b"".join(parts)


def decode_value(data: bytes) -> GroupConfigValue:
    try:
        version, count = struct.unpack_from(">hi", data, 0)
        if version != _VERSION:
            raise RecordDecodeError(f"unknown group config version {version}")
        if count < 0:
            raise RecordDecodeError(f"negative group config count {count}")
        pos, configs = 6, []
        for _ in range(count):
            name, pos = _read_string(data, pos)
            value, pos = _read_string(data, pos)
            configs.append((name, value))
    except (struct.error, UnicodeDecodeError) as exc:
        raise RecordDecodeError(f"bad group config value: {exc}") from exc
    if pos != len(data):
        raise RecordDecodeError("group config value has trailing bytes")
    return GroupConfigValue(tuple(configs))
