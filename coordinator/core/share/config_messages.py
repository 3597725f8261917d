"""DescribeConfigs (API 32) and IncrementalAlterConfigs (API 44) for GROUP resources, as commands
to the core (coordinator.core.handlers.group_configs) and their results.

A request's resources keep their order and their type: the core answers GROUP resources (type
32) and refuses the others (groupcoord keeps no topic or broker configs), so the shell can put
the answers back in request order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from coordinator.core.messages import ErrorCode

__all__ = [
    "GROUP_RESOURCE",
    "AlterConfigsResource",
    "AlterGroupConfigs",
    "AlterGroupConfigsResult",
    "AlteredResource",
    "DescribeGroupConfigs",
    "DescribeGroupConfigsResult",
    "DescribedConfig",
    "DescribedResource",
]

GROUP_RESOURCE: Final = 32  # ConfigResource.Type.GROUP
# DescribeConfigs' ConfigSource
STATIC_BROKER_CONFIG: Final = 4
DEFAULT_CONFIG: Final = 5
DYNAMIC_GROUP_CONFIG: Final = 8
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class DescribeGroupConfigs:
    resources: tuple[tuple[int, str, tuple[str, ...] | None], ...]  # (type, name, keys or all)
    include_synonyms: bool = False
    include_documentation: bool = False


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    name: str
    value: str | None
    source: int
    config_type: int
    synonyms: tuple[tuple[str, str | None, int], ...] = ()  # (name, value, source)
    documentation: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedResource:
    resource_type: int
    resource_name: str
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    configs: tuple[DescribedConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeGroupConfigsResult:
    results: tuple[DescribedResource, ...]


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource_type: int
    resource_name: str
    configs: tuple[tuple[str, int, str | None], ...]  # (name, operation, value)


@dataclass(frozen=True, slots=True)
class AlterGroupConfigs:
    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlteredResource:
    resource_type: int
    resource_name: str
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AlterGroupConfigsResult:
    responses: tuple[AlteredResource, ...]
