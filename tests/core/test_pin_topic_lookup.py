"""Which topics of an offset commit a sidecar asks its upstream about
(core.topics.topics_to_look_up, the pure rule of coordinator.sidecar.topic_lookup), and the
partition bounds of a declared topic, pinned in the fast suite where `make mutation` found no
test it could run (issue 36: the rule's own test is in tests/sidecar/test_topic_lookup.py, among
the real-client tests mutmut leaves out).
"""

from __future__ import annotations

import uuid

import pytest

from coordinator.core.topics import (
    MAX_PARTITIONS,
    TopicCatalog,
    TopicInfo,
    parse_topic_spec,
    topics_to_look_up,
)


def test_topics_the_catalog_cannot_vouch_for_are_looked_up_once_each_in_request_order() -> None:
    catalog = TopicCatalog([TopicInfo("known", uuid.uuid4(), 4)])
    assert topics_to_look_up(catalog, []) == ()
    assert topics_to_look_up(catalog, [("known", [0, 3])]) == ()
    assert topics_to_look_up(catalog, [("known", [])]) == ()
    assert topics_to_look_up(catalog, [("known", [4])]) == ("known",)  # partitions added since
    assert topics_to_look_up(catalog, [("known", [1, 9])]) == ("known",)
    requested = [("new", [0]), ("bad name!", [0]), ("new", [1]), ("known", [1]), ("", [0]),
                 ("other", [2]), ("known", [5])]  # fmt: skip
    assert topics_to_look_up(catalog, requested) == ("new", "other", "known")


def test_a_declared_topic_has_1_to_max_partitions() -> None:
    assert parse_topic_spec("t:1") == ("t", 1)
    assert parse_topic_spec(f"t:{MAX_PARTITIONS}") == ("t", MAX_PARTITIONS)
    for bad in ("t:0", f"t:{MAX_PARTITIONS + 1}", "t:-1"):
        with pytest.raises(ValueError, match="partitions must be between 1 and"):
            parse_topic_spec(bad)
