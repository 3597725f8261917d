"""The group config record (type 105): bytes round trip, damage refused, and replay giving the
group's share partitions and heartbeat answers its values (a tombstone: the broker's again)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.coordinator import GroupCoordinator
from coordinator.core.effects import CoordinatorConfig
from coordinator.core.record_codec import decode_record, encode_record
from coordinator.core.record_wire import RecordDecodeError
from coordinator.core.records import Record
from coordinator.core.share import group_configs as gc
from coordinator.core.share.group_configs import GroupConfigKey, GroupConfigValue
from coordinator.core.topics import TopicCatalog

_TEXT = st.text(max_size=20)


@given(st.text(max_size=30), st.lists(st.tuples(_TEXT, _TEXT), max_size=6))
def test_round_trip(group: str, configs: list[tuple[str, str]]) -> None:
    record = Record(GroupConfigKey(group), GroupConfigValue(tuple(configs)))
    assert decode_record(*encode_record(record)) == record
    tombstone = Record(GroupConfigKey(group), None)
    assert decode_record(*encode_record(tombstone)) == tombstone


def test_a_cut_value_is_refused() -> None:
    key, value = encode_record(Record(GroupConfigKey("g"), GroupConfigValue((("a", "b"),))))
    assert value is not None
    for cut in (value[:-1], value[:5], value + b"x"):
        with pytest.raises(RecordDecodeError):
            decode_record(key, cut)


def test_replay_applies_and_a_tombstone_forgets() -> None:
    core = GroupCoordinator(CoordinatorConfig(), TopicCatalog(), lambda prefix: f"{prefix}-1")
    share = core.state.share
    part = share.share_partition("g", uuid.UUID(int=1), 0)  # live before the config
    core.replay(Record(GroupConfigKey("g"), GroupConfigValue((
        ("share.delivery.count.limit", "2"), ("share.record.lock.duration.ms", "2000"),
        ("share.auto.offset.reset", "earliest")))))
    assert (part.config.delivery_count_limit, part.config.record_lock_duration_ms) == (2, 2000)
    assert share.partition_config("other").delivery_count_limit == 5
    assert share.auto_offset_reset("g") == "earliest"
    core.replay(Record(GroupConfigKey("g"), None))
    assert part.config == CoordinatorConfig().share_partition
    assert share.auto_offset_reset("g") == "latest"


@pytest.mark.parametrize(("policy", "expected"), [
    ("earliest", gc.EARLIEST), ("latest", gc.LATEST), ("by_duration:PT1H", 10_000_000 - 3_600_000),
    ("by_duration:P1DT0.5S", 0), ("by_duration:PT1.5S", 10_000_000 - 1_500)])
def test_reset_timestamp(policy: str, expected: int) -> None:
    assert gc.reset_timestamp(policy, 10_000_000) == expected


def test_heartbeat_interval_and_session_timeout_are_the_groups() -> None:
    from coordinator.core.share.messages import ShareGroupHeartbeat

    core = GroupCoordinator(CoordinatorConfig(), TopicCatalog(), lambda prefix: f"{prefix}-1")
    share = core.state.share
    core.replay(Record(GroupConfigKey("g"), GroupConfigValue((
        ("share.heartbeat.interval.ms", "1500"), ("share.session.timeout.ms", "4000")))))
    joined = share.heartbeat(ShareGroupHeartbeat("g", "m1", 0, None, ("t",)), 1000)
    assert joined.response.heartbeat_interval_ms == 1500
    other = share.heartbeat(ShareGroupHeartbeat("h", "m2", 0, None, ("t",)), 1000)
    assert other.response.heartbeat_interval_ms == CoordinatorConfig().share_heartbeat_interval_ms
    share.expire(1000 + 4000)  # the group's session timeout, not the broker's 45 s
    assert "m1" not in share.groups["g"].members
    assert "m2" in share.groups["h"].members
