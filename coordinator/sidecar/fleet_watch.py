"""Noticing a dead fleet member in a moment, not after the fleet group's session timeout.

Every member keeps one idle connection to every other member's fleet listener. A process that
dies (kill -9, a crash, an OOM kill) has its sockets closed by its kernel at once: the
connection ends, and a new one is refused. That member is then removed from the upstream fleet
group on its behalf, with LeaveGroup v3+ naming its member id (what Kafka's admin
`removeMembersFromConsumerGroup` sends), and this member rejoins at once: its partitions move
in one rebalance, without waiting for the upstream to time out its session.

Invariants:
- Only a closed connection followed by refused reconnects marks a member dead. A member that
  is alive but paused (SIGSTOP, a long GC) keeps its connections up and is never evicted from
  here; the upstream's session timeout still applies to it, and to a host that vanished
  without closing anything. No traffic is sent on the idle connections: an idle fleet costs
  nothing here.
- Evicting a member that was in fact alive is safe: its partitions' new owners claim them with
  a newer epoch, and the evicted member's lease runs out and its next write is fenced
  (coordinator.sidecar.state_topic); it answers nothing from state it lost, and it rejoins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from aiokafka.client import ConnectionGroup
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from coordinator.security.client import PLAINTEXT, ClientSecurity
from coordinator.serve.addresses import parse_host_port

log = logging.getLogger("groupcoord.fleet")

# A refused reconnect is retried this often before the member is taken for dead: a listener
# being replaced in place (a restart on the same address) is not a death.
REFUSALS = 2
RETRY_S = 0.05
CONNECT_TIMEOUT_S = 2.0


class PeerWatch:
    """One idle connection per other member (`update`); `on_dead(address)` when one dies."""

    def __init__(
        self,
        on_dead: Callable[[str], None],
        security: Callable[[], ClientSecurity] = lambda: PLAINTEXT,
    ) -> None:
        self.on_dead = on_dead
        self.security = security
        self._watching: dict[str, asyncio.Task[None]] = {}

    def update(self, addresses: set[str]) -> None:
        """Watch exactly these members' fleet listeners."""
        for address in set(self._watching) - addresses:
            self._watching.pop(address).cancel()
        loop = asyncio.get_running_loop()
        for address in addresses - set(self._watching):
            self._watching[address] = loop.create_task(self._watch(address))

    def close(self) -> None:
        for task in self._watching.values():
            task.cancel()
        self._watching.clear()

    async def _watch(self, address: str) -> None:
        host, port = parse_host_port(address)
        seen = False  # a member never reached (not started yet) is not declared dead
        refusals = 0
        while True:
            try:
                closed = await self._connect(host, port)
            except (OSError, TimeoutError) as exc:
                refusals += 1
                if seen and refusals >= REFUSALS:
                    log.warning("fleet member %s is gone (%s): removing it", address, exc)
                    self.on_dead(address)
                    seen, refusals = False, 0
                await asyncio.sleep(RETRY_S * refusals if seen else 1.0)
                continue
            seen, refusals = True, 0
            await closed
            log.info("fleet connection to %s closed", address)

    async def _connect(self, host: str, port: int) -> asyncio.Future[None]:
        """An idle connection; the future is done when it closes."""
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()
        context = self.security().ssl_context
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            transport, _ = await loop.create_connection(
                lambda: _Idle(closed),
                host,
                port,
                ssl=context,
                server_hostname=host if context is not None else None,
            )
        closed.add_done_callback(lambda _: transport.close())
        return closed


class _Idle(asyncio.Protocol):
    def __init__(self, closed: asyncio.Future[None]) -> None:
        self.closed = closed

    def data_received(self, data: bytes) -> None:
        pass  # nothing is asked, so nothing should come; ignored

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


# -- LeaveGroup v3 on a member's behalf (aiokafka has v0-v1 only) ----------------------------------


class LeaveGroupResponse_v3(Response):  # type: ignore[misc]
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class LeaveGroupRequest_v3(RequestStruct):  # type: ignore[misc]
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group_id", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


class RemoveMembers(Request[LeaveGroupRequest_v3]):  # type: ignore[misc]
    """KIP-345's batched LeaveGroup: members removed by id, by whoever sends it."""

    API_KEY = 13

    def __init__(self, group_id: str, member_ids: list[str]) -> None:
        self.group_id = group_id
        self.member_ids = member_ids

    def build(self, request_struct_class: type[LeaveGroupRequest_v3]) -> LeaveGroupRequest_v3:
        return request_struct_class(self.group_id, [(m, None) for m in self.member_ids])


async def evict(consumer: Any, group_id: str, address: str, member_id: str) -> None:
    """Remove `member_id` (the dead member at `address`) from the fleet group through our own
    consumer's connection to the group's coordinator, then rejoin at once (not at our next
    heartbeat). A failure is logged: the upstream's session timeout still removes it."""
    coordinator = getattr(consumer, "_coordinator", None)
    node = getattr(coordinator, "coordinator_id", None)
    if consumer is None or coordinator is None or node is None:
        return
    request = RemoveMembers(group_id, [member_id])
    try:
        response = await consumer._client.send(node, request, group=ConnectionGroup.COORDINATION)
    except Exception as exc:
        log.warning("cannot remove fleet member %s from %s: %s", address, group_id, exc)
        return
    codes = [m[2] for m in response.members] or [response.error_code]
    # UNKNOWN_MEMBER_ID (25): another survivor removed it first.
    log.info(
        "removed fleet member %s (%s) from fleet group %s (error code %d)",
        address,
        member_id,
        group_id,
        response.error_code or codes[0],
    )
    with contextlib.suppress(Exception):
        coordinator.request_rejoin()
