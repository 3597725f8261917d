"""kio requests <-> the core's group-config commands and results: DescribeConfigs (API 32,
v1-v4) and IncrementalAlterConfigs (API 44, v0-v1), Kafka 4.4's versions, for GROUP resources
(coordinator.core.handlers.group_configs).

coordinator.serve.adapters registers these beside the other group APIs' converters, so the server
routes 32 and 44 into the core, through the runtime (persist, then reply). A sidecar sends only
GROUP resources here: a request naming others too is split (coordinator.sidecar.config_split).

Invariants: answers keep the request's resource order; DescribeConfigs v3+ carries the config
type and documentation (null: groupcoord has no docs to give); pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32Timedelta

from coordinator.core.share.config_messages import (
    GROUP_RESOURCE,
    AlterConfigsResource,
    AlteredResource,
    AlterGroupConfigs,
    AlterGroupConfigsResult,
    DescribedResource,
    DescribeGroupConfigs,
    DescribeGroupConfigsResult,
)
from protocol.apis import DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS, response_module
from protocol.codec import RequestHeader

__all__ = ["API_KEYS", "COMMAND_TYPES", "TO_COMMAND", "TO_RESPONSE", "error_result", "only_groups"]

API_KEYS: Final = frozenset({DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS})
COMMAND_TYPES: Final = (DescribeGroupConfigs, AlterGroupConfigs)
_ZERO_THROTTLE: Final = i32Timedelta.parse(timedelta(0))
_FIRST_WITH_TYPE: Final = 3


def only_groups(request: Any) -> bool:
    """Every resource of a DescribeConfigs / IncrementalAlterConfigs request is a GROUP one."""
    return bool(request.resources) and all(
        int(r.resource_type) == GROUP_RESOURCE for r in request.resources
    )


def group_ids(request: Any) -> list[str]:
    return [r.resource_name for r in request.resources if int(r.resource_type) == GROUP_RESOURCE]


def _describe(header: RequestHeader, r: Any, client_host: str) -> DescribeGroupConfigs:
    return DescribeGroupConfigs(
        tuple(
            (
                int(res.resource_type),
                res.resource_name,
                None if res.configuration_keys is None else tuple(res.configuration_keys),
            )
            for res in r.resources
        ),
        bool(r.include_synonyms),
        bool(getattr(r, "include_documentation", False)),
    )


def _alter(header: RequestHeader, r: Any, client_host: str) -> AlterGroupConfigs:
    return AlterGroupConfigs(
        tuple(
            AlterConfigsResource(
                int(res.resource_type),
                res.resource_name,
                tuple((c.name, int(c.config_operation), c.value) for c in res.configs),
            )
            for res in r.resources
        ),
        bool(r.validate_only),
    )


TO_COMMAND: Final[dict[int, Callable[[RequestHeader, Any, str], object]]] = {
    DESCRIBE_CONFIGS: _describe,
    INCREMENTAL_ALTER_CONFIGS: _alter,
}


def _describe_response(v: int, res: DescribeGroupConfigsResult) -> object:
    mod = response_module(DESCRIBE_CONFIGS, v)

    def entry(c: Any) -> object:
        fields: dict[str, Any] = {
            "name": c.name,
            "value": c.value,
            "read_only": False,
            "config_source": i8(c.source),
            "is_sensitive": False,
            "synonyms": tuple(
                mod.DescribeConfigsSynonym(name=n, value=value, source=i8(source))
                for n, value, source in c.synonyms
            ),
        }
        if v >= _FIRST_WITH_TYPE:
            fields["config_type"] = i8(c.config_type)
            fields["documentation"] = c.documentation
        return mod.DescribeConfigsResourceResult(**fields)

    return mod.DescribeConfigsResponse(
        throttle_time=_ZERO_THROTTLE,
        results=tuple(
            mod.DescribeConfigsResult(
                error_code=r.error,
                error_message=r.error_message,
                resource_type=i8(r.resource_type),
                resource_name=r.resource_name,
                configs=tuple(entry(c) for c in r.configs),
            )
            for r in res.results
        ),
    )


def _alter_response(v: int, res: AlterGroupConfigsResult) -> object:
    mod = response_module(INCREMENTAL_ALTER_CONFIGS, v)
    return mod.IncrementalAlterConfigsResponse(
        throttle_time=_ZERO_THROTTLE,
        responses=tuple(
            mod.AlterConfigsResourceResponse(
                error_code=r.error,
                error_message=r.error_message,
                resource_type=i8(r.resource_type),
                resource_name=r.resource_name,
            )
            for r in res.responses
        ),
    )


TO_RESPONSE: Final[dict[type, tuple[int, Callable[[int, Any], object]]]] = {
    DescribeGroupConfigsResult: (DESCRIBE_CONFIGS, _describe_response),
    AlterGroupConfigsResult: (INCREMENTAL_ALTER_CONFIGS, _alter_response),
}


def error_result(
    header: RequestHeader, r: Any, error: ErrorCode
) -> DescribeGroupConfigsResult | AlterGroupConfigsResult:
    """One error for every resource of the request (loading, a failed write, shutdown)."""
    if header.api_key == DESCRIBE_CONFIGS:
        return DescribeGroupConfigsResult(
            tuple(
                DescribedResource(int(x.resource_type), x.resource_name, error) for x in r.resources
            )
        )
    return AlterGroupConfigsResult(
        tuple(AlteredResource(int(x.resource_type), x.resource_name, error) for x in r.resources)
    )
