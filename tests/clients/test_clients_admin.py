"""Admin APIs through two different clients' admin libraries: list, describe, delete groups.

Issue 2: "admin: list / describe / delete groups through two different clients' admin APIs" —
confluent-kafka's AdminClient (librdkafka) and kafka-python's KafkaAdminClient, against one group
with live members (kafka-python consumers) and one emptied by LeaveGroup.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.realclients import (
    PARTITIONS,
    assert_stable_and_described,
    describe_confluent,
    describe_kafka_python,
    driver_command,
    kafka_python_admin,
    wait_until,
)

pytestmark = pytest.mark.clients


def confluent_admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def confluent_list(bootstrap: str, states=None) -> dict[str, str]:
    kwargs = {"request_timeout": 10}
    if states is not None:
        from confluent_kafka import ConsumerGroupState

        kwargs["states"] = {getattr(ConsumerGroupState, s) for s in states}
    admin = confluent_admin(bootstrap)  # kept alive until the result is in
    result = admin.list_consumer_groups(**kwargs).result(15)
    assert not result.errors, result.errors
    return {g.group_id: g.state.name for g in result.valid}


def confluent_delete(bootstrap: str, group: str) -> str:
    """'OK' or the Kafka error name (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...)."""
    from confluent_kafka import KafkaException

    admin = confluent_admin(bootstrap)  # kept alive until the result is in
    future = admin.delete_consumer_groups([group], request_timeout=10)[group]
    try:
        future.result(15)
    except KafkaException as exc:
        return exc.args[0].name()
    return "OK"


def kafka_python_list(bootstrap: str) -> dict[str, str]:
    admin = kafka_python_admin(bootstrap)
    try:
        groups = admin.list_groups()
    finally:
        admin.close()
    return {g["group_id"]: g.get("group_state") or "" for g in groups}


def kafka_python_delete(bootstrap: str, group: str) -> str:
    """'OK' or kafka-python's error class name (NonEmptyGroupError, GroupIdNotFoundError, ...)."""
    admin = kafka_python_admin(bootstrap)
    try:
        return admin.delete_groups([group])[group]
    finally:
        admin.close()


async def test_list_describe_delete_through_two_admin_clients(server, members):
    broker = server(topics={"orders": PARTITIONS})
    bootstrap = broker.bootstrap
    live = [await members("kafka-python", f"kp-{i}", bootstrap=bootstrap, group="admin-live",
                          topic="orders") for i in range(2)]
    leaving = await members("confluent", "rk-0", bootstrap=bootstrap, group="admin-empty",
                            topic="orders")
    await assert_stable_and_described(broker, "admin-live", live)
    await assert_stable_and_described(broker, "admin-empty", [leaving])
    await leaving.close()

    # List: both clients see both groups, with their states.
    await wait_until(lambda: confluent_list(bootstrap).get("admin-empty") == "EMPTY", 15,
                     "admin-empty to be listed as Empty after its only member left")
    listed = await asyncio.to_thread(confluent_list, bootstrap)
    assert listed.get("admin-live") == "STABLE", listed
    stable_only = await asyncio.to_thread(confluent_list, bootstrap, ["STABLE"])
    assert "admin-live" in stable_only and "admin-empty" not in stable_only, stable_only
    listed_kp = await asyncio.to_thread(kafka_python_list, bootstrap)
    assert {"admin-live", "admin-empty"} <= set(listed_kp), listed_kp

    # Describe: both clients agree on state, protocol, members and their client ids.
    c_view = await asyncio.to_thread(describe_confluent, bootstrap, "admin-live")
    k_view = await asyncio.to_thread(describe_kafka_python, bootstrap, "admin-live")
    assert c_view == k_view
    assert c_view.state == "STABLE" and c_view.protocol == "range"
    assert sorted(c_view.client_ids.values()) == ["kp-0", "kp-1"]
    assert c_view.members == {m.member_id: m.owned for m in live}
    empty = await asyncio.to_thread(describe_kafka_python, bootstrap, "admin-empty")
    assert empty.state == "EMPTY" and empty.members == {}

    # Delete: a group with members is refused by both, an empty one goes, a missing one is unknown.
    assert await asyncio.to_thread(confluent_delete, bootstrap, "admin-live") == "NON_EMPTY_GROUP"
    assert await asyncio.to_thread(kafka_python_delete, bootstrap,
                                   "admin-live") == "NonEmptyGroupError"
    assert await asyncio.to_thread(kafka_python_delete, bootstrap, "admin-empty") == "OK"
    assert await asyncio.to_thread(confluent_delete, bootstrap,
                                   "admin-empty") == "GROUP_ID_NOT_FOUND"
    listed = await asyncio.to_thread(confluent_list, bootstrap)
    assert "admin-empty" not in listed and "admin-live" in listed, listed

    # Once its members leave, the other group can be deleted through the other client.
    for m in live:
        await m.close()
    await wait_until(lambda: kafka_python_list(bootstrap).get("admin-live") in ("Empty", ""), 15,
                     "admin-live to be Empty after both members left")
    assert await asyncio.to_thread(confluent_delete, bootstrap, "admin-live") == "OK"
    assert await asyncio.to_thread(kafka_python_delete, bootstrap,
                                   "admin-live") == "GroupIdNotFoundError"
    assert "admin-live" not in await asyncio.to_thread(kafka_python_list, bootstrap)


def java_admin(peers, bootstrap: str, *args: str) -> dict:
    import json
    import subprocess

    cmd = driver_command("java", peers, [])
    cmd = [*cmd[: cmd.index("ConsumerDriver")], "AdminDriver", bootstrap, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"AdminDriver {args}: {done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.java
async def test_java_admin_client_lists_describes_deletes(server, members, java_peers):
    broker = server(topics={"orders": PARTITIONS})
    bootstrap = broker.bootstrap
    live = [await members("confluent", f"rk-{i}", bootstrap=bootstrap, group="java-admin",
                          topic="orders") for i in range(2)]
    await assert_stable_and_described(broker, "java-admin", live)

    listed = await asyncio.to_thread(java_admin, java_peers, bootstrap, "list")
    assert listed["groups"].get("java-admin") == "Stable", listed
    described = await asyncio.to_thread(java_admin, java_peers, bootstrap, "describe",
                                         "java-admin")
    assert described["state"] == "Stable" and described["protocol"] == "range", described
    assert {k: frozenset(v) for k, v in described["members"].items()} == {
        m.member_id: m.owned for m in live}
    refused = await asyncio.to_thread(java_admin, java_peers, bootstrap, "delete", "java-admin")
    assert refused["result"] == "GroupNotEmptyException", refused

    for m in live:
        await m.close()
    await wait_until(lambda: confluent_list(bootstrap).get("java-admin") == "EMPTY", 15,
                     "java-admin to be Empty after its members left")
    deleted = await asyncio.to_thread(java_admin, java_peers, bootstrap, "delete", "java-admin")
    assert deleted["result"] == "OK", deleted
    again = await asyncio.to_thread(java_admin, java_peers, bootstrap, "delete", "java-admin")
    assert again["result"] == "GroupIdNotFoundException", again
