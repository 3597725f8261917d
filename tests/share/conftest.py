"""Where a share test runs: Apache Kafka 4.4's native share groups (the reference), or groupcoord's
sidecar in front of Kafka or tansu (the sidecar keeps the share state itself and fetches upstream
with plain Fetch). The same client program and the same steps run against each `target`; the
sidecar ones must deliver what Kafka delivers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import realclients as rc
from tests.support import share_util as su
from tests.support.sidecar_util import RawClient, Sidecar, Stack, Upstream, create_topic, kio, stack

__all__ = ["stack"]  # the fixture, for every share test

SHARE_APIS = {76: "ShareGroupHeartbeat", 77: "ShareGroupDescribe", 78: "ShareFetch",
              79: "ShareAcknowledge"}
TARGETS = [pytest.param("kafka", id="kafka"),
           pytest.param("sidecar-kafka", id="sidecar-kafka"),
           pytest.param("sidecar-tansu", id="sidecar-tansu")]


@dataclass
class Target:
    kind: str  # kafka | sidecar-kafka | sidecar-tansu
    upstream: Upstream  # where topics are created and records produced
    sidecar: Sidecar | None = None

    @property
    def bootstrap(self) -> str:
        """What the share consumers and the admin client talk to."""
        return self.sidecar.bootstrap if self.sidecar is not None else self.upstream.bootstrap

    @property
    def port(self) -> int:
        """Where ShareGroupDescribe goes (a one-node Kafka coordinates every group)."""
        return self.sidecar.port if self.sidecar is not None else self.upstream.port

    def name(self, prefix: str) -> str:
        return self.upstream.name(prefix)

    async def check(self) -> None:
        """The target offers the share APIs (ApiVersions); fails at once when it does not."""
        client = await RawClient.connect(self.port)
        try:
            versions = await client.call(kio(18, 3, "ApiVersionsRequest",
                                              client_software_name="share-test",
                                              client_software_version="1"))
        finally:
            client.close()
        offered = {k.api_key for k in versions.api_keys}
        missing = [name for key, name in SHARE_APIS.items() if key not in offered]
        assert not missing, f"{self.kind} does not offer {missing}"

    async def prepare(self, topic: str, group: str, configs: dict[str, str] | None = None
                      ) -> None:
        """A one-partition topic, and the group's configs set before any member joins."""
        await self.check()
        await create_topic(self.upstream.bootstrap, topic, 1)
        su.set_group_configs(self.bootstrap, group, {**su.BASE_CONFIGS, **(configs or {})})


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest, stack: Stack) -> Target:
    kind = request.param
    if kind == "sidecar-tansu":
        t = stack.tansu()
        upstream = Upstream("tansu", t.bootstrap, tansu=t)
    else:
        cluster = request.getfixturevalue("kafka")
        upstream = Upstream("kafka", cluster.bootstrap, kafka=cluster)
    if kind == "kafka":
        return Target(kind, upstream)
    return Target(kind, upstream, stack.sidecar(upstream.bootstrap))


@pytest.fixture(params=[pytest.param(k, marks=pytest.mark.java, id=k) if k == "java"
                        else pytest.param(k, id=k) for k in su.SHARE_KINDS])
def share_kind(request: pytest.FixtureRequest) -> str:
    """A share client: confluent (librdkafka's preview ShareConsumer) or java (KafkaShareConsumer);
    the Java one skips when its driver is not compiled into the peers."""
    return share_client(request, request.param)


def share_client(request: pytest.FixtureRequest, kind: str) -> str:
    """`kind`, once its driver can run here (otherwise the test skips with the reason)."""
    rc.require_kind(request, kind)
    peers: Path = request.getfixturevalue("peers_dir")
    if kind == "java" and not (peers / "java" / "classes" / "ShareDriver.class").is_file():
        pytest.skip(f"ShareDriver is not compiled in {peers} (run `make peers`)")
    return kind
