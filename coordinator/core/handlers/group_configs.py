"""DescribeConfigs (API 32) and IncrementalAlterConfigs (API 44) on GROUP resources: a group's
configs (coordinator.core.share.group_configs) as Kafka 4.4 answers them.

Rules:
- Describe, per GROUP resource: every config GroupConfig defines (or those asked for, unknown
  names left out), its value the group's (source DYNAMIC_GROUP_CONFIG) or the broker's setting
  (DEFAULT_CONFIG); no group needs to exist (Kafka answers any id). With synonyms asked: the
  group's own entry then the broker's.
- Alter, per GROUP resource: SET / DELETE; a SET without a value, or a key twice ->
  INVALID_REQUEST; APPEND / SUBTRACT -> INVALID_CONFIG (no group config is a list); the
  group's whole config after the change is validated (INVALID_CONFIG with GroupConfig's words);
  validate_only answers without writing. A change is one record, replayed at once and durable
  before the answer leaves.
- While the core loads: COORDINATOR_LOAD_IN_PROGRESS per GROUP resource (Kafka reads group
  configs from its metadata image, which is never loading; groupcoord's are in the group log).
- Other resource types: groupcoord keeps no topic or broker configs; standalone refuses them
  with INVALID_REQUEST (a sidecar sends them upstream and never here).
"""

from __future__ import annotations

from coordinator.core.effects import Effects
from coordinator.core.messages import ErrorCode
from coordinator.core.records import Record
from coordinator.core.share import group_configs as gc
from coordinator.core.share.config_messages import (
    DEFAULT_CONFIG,
    DYNAMIC_GROUP_CONFIG,
    GROUP_RESOURCE,
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    STATIC_BROKER_CONFIG,
    AlterConfigsResource,
    AlteredResource,
    AlterGroupConfigs,
    AlterGroupConfigsResult,
    DescribedConfig,
    DescribedResource,
    DescribeGroupConfigs,
    DescribeGroupConfigsResult,
)
from coordinator.core.state import CoreState

E = ErrorCode
_NOT_HERE = "groupcoord keeps only GROUP resources' configs"
_OPS = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}


def defaults(state: CoreState) -> dict[str, str]:
    c = state.config
    return gc.broker_defaults(
        c.consumer_session_timeout_ms, c.consumer_heartbeat_interval_ms,
        c.share_session_timeout_ms, c.share_heartbeat_interval_ms, c.share_partition,
    )  # fmt: skip


def describe(
    state: CoreState, reply_to: int, cmd: DescribeGroupConfigs, now_ms: int, fx: Effects
) -> None:
    base = defaults(state)
    results = []
    for rtype, name, keys in cmd.resources:
        if rtype != GROUP_RESOURCE:
            results.append(DescribedResource(rtype, name, E.invalid_request, _NOT_HERE))
            continue
        if state.loading:  # its record may not be replayed yet (Kafka's are in its metadata)
            results.append(DescribedResource(rtype, name, E.coordinator_load_in_progress))
            continue
        if not name:  # Kafka: ConfigResource with an empty group name
            results.append(
                DescribedResource(rtype, name, E.invalid_request, "Group name must not be empty")
            )
            continue
        own = state.share.group_configs.get(name, {})
        entries = []
        for d in gc.CONFIG_DEFS.values():
            if keys is not None and d.name not in keys:
                continue
            entries.append(_entry(d, own.get(d.name), base[d.name], cmd.include_synonyms))
        # Kafka answers an empty (not null) message with NONE here.
        results.append(DescribedResource(rtype, name, E.none, "", tuple(entries)))
    fx.replies.append((reply_to, DescribeGroupConfigsResult(tuple(results))))


def _entry(d: gc.ConfigDef, own: str | None, default: str, synonyms: bool) -> DescribedConfig:
    # Kafka: STATIC_BROKER_CONFIG where the broker's server.properties sets the setting, else
    # DEFAULT_CONFIG. groupcoord cannot tell a setting given at its default value from none, so
    # a value other than Kafka's default counts as set.
    source = DEFAULT_CONFIG if default == d.kafka_default else STATIC_BROKER_CONFIG
    chain: list[tuple[str, str | None, int]] = []
    if synonyms:
        if own is not None:
            chain.append((d.name, own, DYNAMIC_GROUP_CONFIG))
        chain.append((d.broker_name or d.name, default, source))
        if source == STATIC_BROKER_CONFIG:
            chain.append((d.broker_name, d.kafka_default, DEFAULT_CONFIG))
    if own is not None:
        return DescribedConfig(d.name, own, DYNAMIC_GROUP_CONFIG, d.config_type, tuple(chain))
    return DescribedConfig(d.name, default, source, d.config_type, tuple(chain))


def alter(
    state: CoreState, reply_to: int, cmd: AlterGroupConfigs, now_ms: int, fx: Effects
) -> None:
    base = defaults(state)
    out = []
    for r in cmd.resources:
        error, message = _alter_one(state, fx, r, base, cmd.validate_only)
        out.append(AlteredResource(r.resource_type, r.resource_name, error, message))
    fx.replies.append((reply_to, AlterGroupConfigsResult(tuple(out))))


def _alter_one(
    state: CoreState, fx: Effects, r: AlterConfigsResource, base: dict[str, str], dry: bool
) -> tuple[ErrorCode, str | None]:
    if r.resource_type != GROUP_RESOURCE:
        return E.invalid_request, _NOT_HERE
    if state.loading:  # validated against what is not replayed yet, a change would lose it
        return E.coordinator_load_in_progress, None
    if not r.resource_name:  # ControllerConfigurationValidator's words
        return E.invalid_request, "Default group resources are not allowed."
    names = [name for name, _, _ in r.configs]
    if len(set(names)) != len(names):  # ConfigAdminManager.preprocess
        return E.invalid_request, "Error due to duplicate config keys"
    current = dict(state.share.group_configs.get(r.resource_name, {}))
    for name, op, value in r.configs:
        if op == OP_SET:
            if value is None:
                return E.invalid_request, f"Null value not supported for : {name}"
            current[name] = value
        elif op == OP_DELETE:
            current.pop(name, None)
        elif op in (OP_APPEND, OP_SUBTRACT):
            return (
                E.invalid_config,
                f"Can't {_OPS[op]} to key {name} because its type is not LIST.",
            )
        else:
            return E.invalid_request, f"Unknown alter configs operation {op}"
    problem = gc.validate(current, base)
    if problem is not None:
        return E.invalid_config, problem
    if not dry:
        key = gc.GroupConfigKey(r.resource_name)
        stored = gc.GroupConfigValue(tuple(sorted(current.items()))) if current else None
        fx.records.append(Record(key, stored))
        state.share.replay_group_config(key, stored)
    return E.none, None
