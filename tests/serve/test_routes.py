"""Routing as data: the server routes exactly the APIs that ApiVersions advertises."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.topics import TopicCatalog
from coordinator.serve.server import Server, ServerOptions
from protocol import apis, codec
from protocol.codec import RequestHeader


def server() -> Server:
    options = ServerOptions(host="127.0.0.1", port=0, coordinator=CoordinatorConfig())
    return Server(options, TopicCatalog(), lambda prefix: prefix)


def test_advertised_equals_routed() -> None:
    header = RequestHeader(apis.API_VERSIONS, 3, 1, "c")
    request = apis.request_class(apis.API_VERSIONS, 3)(
        client_software_name="t", client_software_version="1"
    )
    advertised = {k.api_key for k in codec.api_versions_response(header, request).api_keys}
    assert set(server().routes) == advertised == set(apis.APIS)


def test_an_advertised_api_without_a_handler_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra = apis.ApiSpec(28, "txn_offset_commit", 0, 4, 3)  # advertised, but nobody answers it
    monkeypatch.setattr(apis, "APIS", MappingProxyType({**apis.APIS, 28: extra}))
    with pytest.raises(AssertionError, match=r"routed .* != advertised"):
        server()
