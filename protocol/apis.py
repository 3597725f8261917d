"""The one table of APIs this coordinator speaks, and the kio classes for each (api_key, version).

Invariants:
- `API_TABLE` is the single source of truth: ApiVersions is derived from it, the codec rejects any
  (api_key, version) outside it, and the adapters only ever see versions inside it.
- Advertise only what is fully implemented: a client picks the highest common version, so an
  advertised but half-done version breaks it (tansu advertised everything and broke franz-go).
- `first_flexible` is the first version using KIP-482 compact encoding and tagged fields; it selects
  request header v2 / response header v1 (ApiVersions responses always use header v0, KIP-511).
  The tests check it against kio's generated `__flexible__` for every advertised version.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType, ModuleType
from typing import Final

__all__ = [
    "ALTER_SHARE_GROUP_OFFSETS",
    "ALTER_USER_SCRAM_CREDENTIALS",
    "APIS",
    "API_TABLE",
    "API_VERSIONS",
    "CONSUMER_GROUP_APIS",
    "CONSUMER_GROUP_DESCRIBE",
    "CONSUMER_GROUP_HEARTBEAT",
    "CREATE_ACLS",
    "CREATE_PARTITIONS",
    "CREATE_TOPICS",
    "DELETE_ACLS",
    "DELETE_GROUPS",
    "DELETE_SHARE_GROUP_OFFSETS",
    "DELETE_TOPICS",
    "DESCRIBE_ACLS",
    "DESCRIBE_CONFIGS",
    "DESCRIBE_GROUPS",
    "DESCRIBE_SHARE_GROUP_OFFSETS",
    "DESCRIBE_USER_SCRAM_CREDENTIALS",
    "FETCH",
    "FIND_COORDINATOR",
    "GROUP_APIS",
    "GROUP_CONFIG_APIS",
    "HEARTBEAT",
    "INCREMENTAL_ALTER_CONFIGS",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "LIST_GROUPS",
    "LIST_OFFSETS",
    "METADATA",
    "OFFSET_COMMIT",
    "OFFSET_DELETE",
    "OFFSET_FETCH",
    "PRODUCE",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "SHARE_GROUP_APIS",
    "SHARE_GROUP_DESCRIBE",
    "SHARE_GROUP_HEARTBEAT",
    "SYNC_GROUP",
    "ApiSpec",
    "is_flexible",
    "is_supported",
    "request_class",
    "request_module",
    "response_class",
    "response_module",
    "supported_ranges",
]

PRODUCE: Final = 0
FETCH: Final = 1
LIST_OFFSETS: Final = 2
METADATA: Final = 3
OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
API_VERSIONS: Final = 18
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
CREATE_PARTITIONS: Final = 37
DELETE_GROUPS: Final = 42
OFFSET_DELETE: Final = 47
SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
DESCRIBE_ACLS: Final = 29
CREATE_ACLS: Final = 30
DELETE_ACLS: Final = 31
DESCRIBE_USER_SCRAM_CREDENTIALS: Final = 50
ALTER_USER_SCRAM_CREDENTIALS: Final = 51
CONSUMER_GROUP_HEARTBEAT: Final = 68
CONSUMER_GROUP_DESCRIBE: Final = 69
SHARE_GROUP_HEARTBEAT: Final = 76
SHARE_GROUP_DESCRIBE: Final = 77
DESCRIBE_SHARE_GROUP_OFFSETS: Final = 90
ALTER_SHARE_GROUP_OFFSETS: Final = 91
DELETE_SHARE_GROUP_OFFSETS: Final = 92
DESCRIBE_CONFIGS: Final = 32
INCREMENTAL_ALTER_CONFIGS: Final = 44


@dataclass(frozen=True, slots=True)
class ApiSpec:
    api_key: int
    name: str  # kio's schema package name, kio.schema.<name>.v<N>
    min_version: int
    max_version: int
    first_flexible: int | None  # None: never flexible (OffsetDelete)

    def flexible(self, version: int) -> bool:
        return self.first_flexible is not None and version >= self.first_flexible


# Version ranges: change them here and nowhere else. Sources: docs/protocol.md §1.2 and kio 0.6.5.
API_TABLE: Final[tuple[ApiSpec, ...]] = (
    # Produce is answered only to refuse it (standalone stores no records; broker.answers).
    # It is advertised because librdkafka enables Fetch's v2 record format (MsgVer2) only when
    # the broker offers Produce v3+ beside Fetch v4+: without it, its consumers never fetch and
    # spin (issue 27). v3 is Kafka 4.0's floor (KIP-896); v11 is what Java 3.9 sends.
    ApiSpec(PRODUCE, "produce", 3, 11, 9),
    ApiSpec(FETCH, "fetch", 4, 12, 12),
    ApiSpec(LIST_OFFSETS, "list_offsets", 1, 7, 6),
    ApiSpec(METADATA, "metadata", 0, 12, 9),
    ApiSpec(OFFSET_COMMIT, "offset_commit", 2, 9, 8),
    ApiSpec(OFFSET_FETCH, "offset_fetch", 1, 9, 6),
    ApiSpec(FIND_COORDINATOR, "find_coordinator", 0, 6, 3),
    ApiSpec(JOIN_GROUP, "join_group", 0, 9, 6),
    ApiSpec(HEARTBEAT, "heartbeat", 0, 4, 4),
    ApiSpec(LEAVE_GROUP, "leave_group", 0, 5, 4),
    ApiSpec(SYNC_GROUP, "sync_group", 0, 5, 4),
    # v6 (Kafka 4.0, KIP-1043): an unknown group is GROUP_ID_NOT_FOUND with a message, which
    # Kafka 4's Admin (kafka-consumer-groups.sh --describe) reports as "Group X not found.".
    ApiSpec(DESCRIBE_GROUPS, "describe_groups", 0, 6, 5),
    ApiSpec(LIST_GROUPS, "list_groups", 0, 5, 3),
    ApiSpec(API_VERSIONS, "api_versions", 0, 4, 3),
    # Topic admin (standalone mode, broker.topic_admin). Kafka 4.0's floors (KIP-896); the
    # tops are what Java 3.9 sends; librdkafka 2.x sends <= 4/4/2, aiokafka <= 3/3/1, kafka-python
    # 3 <= 7/6/3 (each picks the highest common version).
    ApiSpec(CREATE_TOPICS, "create_topics", 2, 7, 5),
    ApiSpec(DELETE_TOPICS, "delete_topics", 1, 6, 4),
    ApiSpec(CREATE_PARTITIONS, "create_partitions", 0, 3, 2),
    ApiSpec(DELETE_GROUPS, "delete_groups", 0, 2, 2),
    ApiSpec(OFFSET_DELETE, "offset_delete", 0, 0, None),
    # Security (issue 22; coordinator.serve.secure, coordinator.broker.security_admin). SASL:
    # SaslHandshake v1 only (v0's unframed tokens went with KIP-896); the ACL APIs from v1, as
    # Kafka 4.0 (kio has no v0); SCRAM credentials (KIP-554) v0.
    ApiSpec(SASL_HANDSHAKE, "sasl_handshake", 1, 1, None),
    ApiSpec(SASL_AUTHENTICATE, "sasl_authenticate", 0, 2, 2),
    ApiSpec(DESCRIBE_ACLS, "describe_acls", 1, 3, 2),
    ApiSpec(CREATE_ACLS, "create_acls", 1, 3, 2),
    ApiSpec(DELETE_ACLS, "delete_acls", 1, 3, 2),
    ApiSpec(DESCRIBE_USER_SCRAM_CREDENTIALS, "describe_user_scram_credentials", 0, 0, 0),
    ApiSpec(ALTER_USER_SCRAM_CREDENTIALS, "alter_user_scram_credentials", 0, 0, 0),
    # KIP-848 consumer groups (issue 23). ConsumerGroupHeartbeat v0 is what Java 3.9 sends (v1,
    # Kafka 4.0, only has the client generate its member id: KIP-1082), librdkafka 2.10+ sends
    # v1; ConsumerGroupDescribe v0 (Java 3.9), v1 (4.0: the members' MemberType). Both always
    # flexible. Kafka 4.0-4.1 advertise 68 v0-1 and 69 v0-1.
    ApiSpec(CONSUMER_GROUP_HEARTBEAT, "consumer_group_heartbeat", 0, 1, 0),
    ApiSpec(CONSUMER_GROUP_DESCRIBE, "consumer_group_describe", 0, 1, 0),
    # KIP-932 share groups' membership: v1 only, as Kafka 4.1-4.4 (v0 was 4.0's early access,
    # removed in 4.1); always flexible.
    ApiSpec(SHARE_GROUP_HEARTBEAT, "share_group_heartbeat", 1, 1, 0),
    ApiSpec(SHARE_GROUP_DESCRIBE, "share_group_describe", 1, 1, 0),
    # KIP-932 share groups' offset admin: Kafka 4.4's ranges (90 v1 adds the Lag, KIP-1226).
    ApiSpec(DESCRIBE_SHARE_GROUP_OFFSETS, "describe_share_group_offsets", 0, 1, 0),
    ApiSpec(ALTER_SHARE_GROUP_OFFSETS, "alter_share_group_offsets", 0, 0, 0),
    ApiSpec(DELETE_SHARE_GROUP_OFFSETS, "delete_share_group_offsets", 0, 0, 0),
    # The GROUP config resource (KIP-848/932's group configs): Kafka 4.4's ranges (DescribeConfigs
    # v0 went with KIP-896). Answered for GROUP resources only (coordinator.core.handlers.
    # group_configs); a sidecar sends requests naming other resources upstream.
    ApiSpec(DESCRIBE_CONFIGS, "describe_configs", 1, 4, 4),
    ApiSpec(INCREMENTAL_ALTER_CONFIGS, "incremental_alter_configs", 0, 1, 1),
)

# The classic-group APIs, answered by the coordinator core through coordinator.serve.adapters.
GROUP_APIS: Final = frozenset(
    {
        OFFSET_COMMIT,
        OFFSET_FETCH,
        JOIN_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        SYNC_GROUP,
        DESCRIBE_GROUPS,
        LIST_GROUPS,
        DELETE_GROUPS,
        OFFSET_DELETE,
    }
)

# The KIP-848 consumer-group APIs, answered by the core (coordinator.core.handlers.consumer)
# through coordinator.serve.adapters like GROUP_APIS, but kept apart from them: a sidecar does not
# answer them (coordinator.sidecar.rewrite.WITHHELD).
CONSUMER_GROUP_APIS: Final = frozenset({CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE})

# The KIP-932 share-group membership APIs: answered by the core (coordinator.core.handlers.share)
# the same way, standalone and in a sidecar (routed by group id in a fleet).
# The offset admin APIs (90-92, coordinator.core.handlers.share_admin) are routed with them.
SHARE_GROUP_APIS: Final = frozenset(
    {
        SHARE_GROUP_HEARTBEAT,
        SHARE_GROUP_DESCRIBE,
        DESCRIBE_SHARE_GROUP_OFFSETS,
        ALTER_SHARE_GROUP_OFFSETS,
        DELETE_SHARE_GROUP_OFFSETS,
    }
)

# DescribeConfigs and IncrementalAlterConfigs: answered by the core for GROUP resources, routed by
# group id like the group APIs; a sidecar answers only requests naming GROUP resources alone.
GROUP_CONFIG_APIS: Final = frozenset({DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS})

APIS: Final[Mapping[int, ApiSpec]] = MappingProxyType({spec.api_key: spec for spec in API_TABLE})


def supported_ranges() -> tuple[tuple[int, int, int], ...]:
    """(api_key, min_version, max_version) for every advertised API, ordered by api_key."""
    return tuple(
        (spec.api_key, spec.min_version, spec.max_version)
        for spec in sorted(API_TABLE, key=lambda s: s.api_key)
    )


def is_supported(api_key: int, version: int) -> bool:
    spec = APIS.get(api_key)
    return spec is not None and spec.min_version <= version <= spec.max_version


def is_flexible(api_key: int, version: int) -> bool:
    """Whether (api_key, version) uses KIP-482 flexible encoding; False for unknown APIs."""
    spec = APIS.get(api_key)
    return spec is not None and spec.flexible(version)


def _check(api_key: int, version: int) -> ApiSpec:
    spec = APIS.get(api_key)
    if spec is None or not spec.min_version <= version <= spec.max_version:
        raise KeyError(f"api {api_key} v{version} is not in API_TABLE")
    return spec


@cache
def request_module(api_key: int, version: int) -> ModuleType:
    """kio.schema.<api>.v<N>.request, for nested entity classes (e.g. JoinGroupRequestProtocol)."""
    spec = _check(api_key, version)
    return importlib.import_module(f"kio.schema.{spec.name}.v{version}.request")


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    """kio.schema.<api>.v<N>.response, for nested entity classes (e.g. JoinGroupResponseMember)."""
    spec = _check(api_key, version)
    return importlib.import_module(f"kio.schema.{spec.name}.v{version}.response")


def _payload_class(module: ModuleType, suffix: str) -> type:
    # kio names the payload class after the API: JoinGroupRequest, OffsetFetchResponse, ...
    for name, value in vars(module).items():
        if (
            name.endswith(suffix)
            and isinstance(value, type)
            and value.__module__ == module.__name__
        ):
            kind = getattr(value, "__type__", None)
            if kind is not None and kind.name == suffix.lower():
                return value
    raise LookupError(f"no {suffix} payload class in {module.__name__}")


@cache
def request_class(api_key: int, version: int) -> type:
    """The kio request payload class; KeyError if (api_key, version) is not advertised."""
    return _payload_class(request_module(api_key, version), "Request")


@cache
def response_class(api_key: int, version: int) -> type:
    """The kio response payload class; KeyError if (api_key, version) is not advertised."""
    return _payload_class(response_module(api_key, version), "Response")
