"""Topic names, `--topic NAME:PARTITIONS` specs and the catalog's bookkeeping, pinned whole.

The messages are Kafka's own (Topic.validate in kafka-clients, which CreateTopics answers with and
clients print), so they are compared as strings; the length bound is checked at 249 and 250.

Written for mutation testing (issue 28, `make mutation`): each test fails on a change that the
rest of the suite let through.
"""

from __future__ import annotations

import uuid

import pytest

from coordinator.core.topics import (
    TopicCatalog,
    TopicInfo,
    declared_topic,
    parse_topic_spec,
    topic_name_error,
)


def test_topic_name_errors_are_kafkas_messages() -> None:
    assert topic_name_error("") == "Topic name is illegal, it can't be empty"
    assert topic_name_error(".") == 'Topic name cannot be "." or ".."'
    assert topic_name_error("..") == 'Topic name cannot be "." or ".."'
    assert topic_name_error("...") is None
    assert topic_name_error("a b") == (
        'Topic name "a b" is illegal, it contains a character other than ASCII '
        "alphanumerics, '.', '_' and '-'"
    )
    assert topic_name_error("x" * 249) is None
    assert topic_name_error("x" * 250) == (
        "Topic name is illegal, it can't be longer than 249 characters, topic name: " + "x" * 250
    )


def test_parse_topic_spec() -> None:
    assert parse_topic_spec("orders:4") == ("orders", 4)
    assert parse_topic_spec("big:1000000") == ("big", 1_000_000)
    for spec, message in [
        ("orders", "topic 'orders': expected NAME:PARTITIONS"),
        (":3", "topic ':3': expected NAME:PARTITIONS"),
        ("orders:x", "topic 'orders:x': partitions must be an integer"),
        ("orders:0", "topic 'orders:0': partitions must be between 1 and 1000000"),
        ("orders:1000001", "topic 'orders:1000001': partitions must be between 1 and 1000000"),
        # The count follows the last colon, and the name is held to CreateTopics' rule.
        ("a:b:1", "topic 'a:b:1': Topic name \"a:b\" is illegal, it contains a character other "
                  "than ASCII alphanumerics, '.', '_' and '-'"),
        ("bad topic!:3", "topic 'bad topic!:3': Topic name \"bad topic!\" is illegal, it contains "
                         "a character other than ASCII alphanumerics, '.', '_' and '-'"),
    ]:
        with pytest.raises(ValueError) as caught:
            parse_topic_spec(spec)
        assert str(caught.value) == message


def test_a_declared_topic_has_an_id_stable_across_restarts() -> None:
    a = declared_topic("orders", 4)
    assert (a.name, a.partitions, a.racks) == ("orders", 4, ())
    assert declared_topic("orders", 8).topic_id == a.topic_id  # from the name alone
    assert declared_topic("payments", 4).topic_id != a.topic_id
    assert a.topic_id.version == 5  # name-based (RFC 4122 version 5), not random


def test_catalog_remove_and_partition_count() -> None:
    orders = TopicInfo("orders", uuid.UUID(int=1), 4)
    catalog = TopicCatalog((orders, TopicInfo("payments", uuid.UUID(int=2), 2)))
    assert catalog.partition_count("orders") == 4
    assert catalog.partition_count("nope") is None
    assert catalog.remove("nope") is None
    assert catalog.remove("orders") == orders
    assert catalog.name_of(uuid.UUID(int=1)) is None
    assert catalog.name_of(uuid.UUID(int=2)) == "payments"
    assert "orders" not in catalog and catalog.partition_count("orders") is None
