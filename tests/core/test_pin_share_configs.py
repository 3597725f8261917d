"""Group configs (DescribeConfigs / IncrementalAlterConfigs on GROUP resources) in the pure core,
pinned whole: the answers of tests/share/test_group_configs.py's scenario (which compares them
with Kafka 4.4's, step by step, over a real server), each value and message compared, plus the
rules that scenario does not reach (the broker's own settings, case and spaces, INT bounds,
the consumer session check, loading) and the group config record's damage messages.

Written for mutation testing (issue 36, `make mutation`): each test fails on a change that the
rest of the fast suite let through.
"""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.messages import ErrorCode as E
from coordinator.core.record_codec import decode_record, encode_record
from coordinator.core.record_wire import RecordDecodeError
from coordinator.core.records import Record
from coordinator.core.share import group_configs as gc
from coordinator.core.share.config_messages import (
    AlterConfigsResource,
    AlterGroupConfigs,
    DescribedConfig,
    DescribedResource,
    DescribeGroupConfigs,
)
from coordinator.core.share.group_configs import GroupConfigKey, GroupConfigValue
from coordinator.core.share.values import SharePartitionConfig
from tests.support.fakeclock import Harness

GROUP, TOPIC = 32, 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DEFAULT, STATIC, DYNAMIC = 5, 4, 8
INT, STRING, BOOLEAN = 3, 2, 1


def alter(h: Harness, group: str, *configs: tuple[str, int, str | None], dry: bool = False,
          rtype: int = GROUP) -> tuple[E, str | None]:
    cmd = AlterGroupConfigs((AlterConfigsResource(rtype, group, configs),), dry)
    (answer,) = h.call(cmd).responses
    assert (answer.resource_type, answer.resource_name) == (rtype, group)
    return answer.error, answer.error_message


def describe(h: Harness, group: str, keys: tuple[str, ...] | None = None,
             synonyms: bool = False) -> DescribedResource:
    (answer,) = h.call(DescribeGroupConfigs(((GROUP, group, keys),), synonyms)).results
    return answer


def invalid(name: str, value: str, why: str) -> tuple[E, str]:
    return E.invalid_config, f"Invalid value {value} for configuration {name}: {why}"


def test_nothing_set_describes_every_config_at_the_brokers_defaults() -> None:
    h = Harness()
    assert describe(h, "g") == DescribedResource(GROUP, "g", E.none, "", (
        DescribedConfig("consumer.session.timeout.ms", "45000", DEFAULT, INT),
        DescribedConfig("consumer.heartbeat.interval.ms", "5000", DEFAULT, INT),
        DescribedConfig("share.session.timeout.ms", "45000", DEFAULT, INT),
        DescribedConfig("share.heartbeat.interval.ms", "5000", DEFAULT, INT),
        DescribedConfig("share.record.lock.duration.ms", "30000", DEFAULT, INT),
        DescribedConfig("share.delivery.count.limit", "5", DEFAULT, INT),
        DescribedConfig("share.partition.max.record.locks", "2000", DEFAULT, INT),
        DescribedConfig("share.auto.offset.reset", "latest", DEFAULT, STRING),
        DescribedConfig("share.isolation.level", "read_uncommitted", DEFAULT, STRING),
        DescribedConfig("share.renew.acknowledge.enable", "true", DEFAULT, BOOLEAN),
    ))  # fmt: skip


def test_the_brokers_own_settings_are_static_with_kafkas_default_as_a_synonym() -> None:
    partition = SharePartitionConfig(record_lock_duration_ms=15_000, delivery_count_limit=3,
                                     max_record_locks=500)
    h = Harness(replace(
        CoordinatorConfig(), consumer_session_timeout_ms=20_000,
        consumer_heartbeat_interval_ms=2_000, share_session_timeout_ms=30_000,
        share_heartbeat_interval_ms=3_000, share_partition=partition))  # fmt: skip
    got = {c.name: (c.value, c.source, c.synonyms) for c in describe(h, "g", synonyms=True).configs}

    def static(name: str, value: str, kafka: str) -> tuple[str, int, tuple[object, ...]]:
        return value, STATIC, ((f"group.{name}", value, STATIC), (f"group.{name}", kafka, DEFAULT))

    assert got == {
        "consumer.session.timeout.ms": static("consumer.session.timeout.ms", "20000", "45000"),
        "consumer.heartbeat.interval.ms": static("consumer.heartbeat.interval.ms", "2000", "5000"),
        "share.session.timeout.ms": static("share.session.timeout.ms", "30000", "45000"),
        "share.heartbeat.interval.ms": static("share.heartbeat.interval.ms", "3000", "5000"),
        "share.record.lock.duration.ms": static("share.record.lock.duration.ms", "15000", "30000"),
        "share.delivery.count.limit": static("share.delivery.count.limit", "3", "5"),
        "share.partition.max.record.locks": static("share.partition.max.record.locks", "500",
                                                   "2000"),
        # The string and boolean configs have no broker setting: their synonym is themselves.
        "share.auto.offset.reset": ("latest", DEFAULT,
                                    (("share.auto.offset.reset", "latest", DEFAULT),)),
        "share.isolation.level": ("read_uncommitted", DEFAULT,
                                  (("share.isolation.level", "read_uncommitted", DEFAULT),)),
        "share.renew.acknowledge.enable": (
            "true", DEFAULT, (("share.renew.acknowledge.enable", "true", DEFAULT),)),
    }  # fmt: skip


def test_set_describe_and_delete_as_kafka_answers_them() -> None:
    h = Harness()
    assert alter(h, "g", ("share.record.lock.duration.ms", SET, "2000"),
                 ("share.delivery.count.limit", SET, "2"),
                 ("share.auto.offset.reset", SET, "earliest")) == (E.none, None)
    assert h.records[-1] == Record(GroupConfigKey("g"), GroupConfigValue((
        ("share.auto.offset.reset", "earliest"), ("share.delivery.count.limit", "2"),
        ("share.record.lock.duration.ms", "2000"))))  # fmt: skip
    # The keys asked for, in the definitions' order; an unknown name is left out.
    assert describe(h, "g", ("share.delivery.count.limit", "nope")).configs == (
        DescribedConfig("share.delivery.count.limit", "2", DYNAMIC, INT),
    )
    assert describe(h, "g", ("share.record.lock.duration.ms", "share.heartbeat.interval.ms",
                             "share.delivery.count.limit"), synonyms=True).configs == (
        DescribedConfig("share.heartbeat.interval.ms", "5000", DEFAULT, INT,
                        (("group.share.heartbeat.interval.ms", "5000", DEFAULT),)),
        DescribedConfig("share.record.lock.duration.ms", "2000", DYNAMIC, INT,
                        (("share.record.lock.duration.ms", "2000", DYNAMIC),
                         ("group.share.record.lock.duration.ms", "30000", DEFAULT))),
        DescribedConfig("share.delivery.count.limit", "2", DYNAMIC, INT,
                        (("share.delivery.count.limit", "2", DYNAMIC),
                         ("group.share.delivery.count.limit", "5", DEFAULT))),
    )  # fmt: skip
    # validate_only answers without writing or changing anything.
    written = len(h.records)
    assert alter(h, "g", ("share.delivery.count.limit", SET, "3"), dry=True) == (E.none, None)
    assert len(h.records) == written
    assert describe(h, "g", ("share.delivery.count.limit",)).configs[0].value == "2"
    # DELETE of a set name and of one never set; the last DELETE writes a tombstone.
    assert alter(h, "g", ("share.delivery.count.limit", DELETE, None),
                 ("no.such.config", DELETE, None)) == (E.none, None)
    assert h.records[-1].value == GroupConfigValue((
        ("share.auto.offset.reset", "earliest"), ("share.record.lock.duration.ms", "2000")))
    assert alter(h, "g", ("share.auto.offset.reset", DELETE, None),
                 ("share.record.lock.duration.ms", DELETE, None)) == (E.none, None)
    assert h.records[-1] == Record(GroupConfigKey("g"), None)
    assert h.core.share.group_configs == {}


def test_refused_changes_answer_kafkas_error_and_message_and_write_nothing() -> None:
    h = Harness()
    limit, lock = "share.delivery.count.limit", "share.record.lock.duration.ms"
    reset = "share.auto.offset.reset"
    cases = [
        ((("no.such.config", SET, "1"),), (E.invalid_config, "Unknown group config name: "
                                           "no.such.config")),
        (((limit, SET, "abc"),), invalid(limit, "abc", "Not a number of type INT")),
        (((limit, SET, "2147483648"),), invalid(limit, "2147483648", "Not a number of type INT")),
        (((limit, SET, "11"),), (E.invalid_config, f"{limit} must be in the range 2 to 10 "
                                 "inclusive.")),
        (((limit, SET, "1"),), invalid(limit, "1", "Value must be at least 2")),
        (((lock, SET, "999"),), invalid(lock, "999", "Value must be at least 1000")),
        (((reset, SET, "sometimes"),), invalid(
            reset, "sometimes", f"Invalid value `sometimes` for configuration {reset}. The value "
            "must be either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'.")),
        (((reset, SET, "by_duration:P"),), invalid(
            reset, "by_duration:P", f"Invalid value `by_duration:P` for configuration {reset}. "
            "The value must be either 'earliest', 'latest' or of the format "
            "'by_duration:<PnDTnHnMn.nS>'.")),
        ((("share.isolation.level", SET, "dirty"),), invalid(
            "share.isolation.level", "dirty",
            "String must be one of: read_committed, read_uncommitted")),
        # Kafka's ValidString is case-sensitive (a boolean or a reset policy is not).
        ((("share.isolation.level", SET, "READ_COMMITTED"),), invalid(
            "share.isolation.level", "READ_COMMITTED",
            "String must be one of: read_committed, read_uncommitted")),
        ((("share.renew.acknowledge.enable", SET, "yes"),), invalid(
            "share.renew.acknowledge.enable", "yes", "Expected value to be either true or false")),
        ((("share.heartbeat.interval.ms", SET, "5000"), ("share.session.timeout.ms", SET, "5000")),
         (E.invalid_config, "share.session.timeout.ms must be greater than "
          "share.heartbeat.interval.ms")),
        ((("consumer.session.timeout.ms", SET, "5000"),),
         (E.invalid_config, "consumer.session.timeout.ms must be greater than "
          "consumer.heartbeat.interval.ms")),
        (((limit, APPEND, "3"),), (E.invalid_config, f"Can't APPEND to key {limit} because its "
                                   "type is not LIST.")),
        (((limit, SUBTRACT, "3"),), (E.invalid_config, f"Can't SUBTRACT to key {limit} because "
                                     "its type is not LIST.")),
        (((limit, SET, None),), (E.invalid_request, f"Null value not supported for : {limit}")),
        (((limit, SET, "3"), (limit, SET, "4")), (E.invalid_request,
                                                  "Error due to duplicate config keys")),
        (((limit, 7, "3"),), (E.invalid_request, "Unknown alter configs operation 7")),
    ]  # fmt: skip
    for configs, answer in cases:
        assert alter(h, "g", *configs) == answer, configs
    assert alter(h, "", (limit, SET, "3")) == (
        E.invalid_request, "Default group resources are not allowed.")
    assert h.records == []
    assert "g" not in h.core.share.group_configs


def test_values_are_read_trimmed_and_words_in_any_case() -> None:
    h = Harness()
    assert alter(h, "g", ("share.delivery.count.limit", SET, " 10 "),
                 ("share.renew.acknowledge.enable", SET, "FALSE"),
                 ("share.partition.max.record.locks", SET, "100"),
                 ("share.isolation.level", SET, " read_committed "),
                 ("share.auto.offset.reset", SET, "by_duration:PT1H"),
                 ("share.session.timeout.ms", SET, "2147483647")) == (E.none, None)  # fmt: skip
    part = h.core.share.share_partition("g", h.catalog.get("orders").topic_id, 0)  # type: ignore[union-attr]
    assert part.config == SharePartitionConfig(30_000, 10, 100, False)
    assert h.core.share.read_committed("g") and not h.core.share.read_committed("other")
    assert alter(h, "g", ("share.renew.acknowledge.enable", SET, " True ")) == (E.none, None)
    assert part.config.renew_enabled is True
    assert alter(h, "g", ("share.isolation.level", SET, "read_uncommitted")) == (E.none, None)
    assert not h.core.share.read_committed("g")
    assert alter(h, "g", ("share.delivery.count.limit", SET, "2")) == (E.none, None)
    assert part.config.delivery_count_limit == 2
    assert gc.validate({"share.delivery.count.limit": "-2147483648"}, describe_defaults()) == (
        "Invalid value -2147483648 for configuration share.delivery.count.limit: Value must be "
        "at least 2")
    assert gc.validate({"share.delivery.count.limit": "-2147483649"}, describe_defaults()) == (
        "Invalid value -2147483649 for configuration share.delivery.count.limit: Not a number of "
        "type INT")


def describe_defaults() -> dict[str, str]:
    return gc.broker_defaults(45_000, 5_000, 45_000, 5_000, SharePartitionConfig())


def test_a_group_config_setting_none_of_the_partitions_keeps_the_brokers() -> None:
    base = SharePartitionConfig(15_000, 3, 500, True)
    assert gc.partition_config(base, {"share.auto.offset.reset": "earliest"}) is None
    assert gc.partition_config(base, {"share.renew.acknowledge.enable": "false"}) == replace(
        base, renew_enabled=False)
    assert gc.partition_config(base, {"share.record.lock.duration.ms": "2000"}) == replace(
        base, record_lock_duration_ms=2000)
    off = gc.broker_defaults(1, 1, 1, 1, replace(base, renew_enabled=False))
    assert off["share.renew.acknowledge.enable"] == "false"


def test_other_resources_and_loading_are_refused_per_resource() -> None:
    h = Harness()
    not_here = "groupcoord keeps only GROUP resources' configs"
    (topic,) = h.call(DescribeGroupConfigs(((TOPIC, "orders", None),))).results
    assert topic == DescribedResource(TOPIC, "orders", E.invalid_request, not_here)
    assert alter(h, "orders", ("x", SET, "1"), rtype=TOPIC) == (E.invalid_request, not_here)
    assert describe(h, "") == DescribedResource(GROUP, "", E.invalid_request,
                                                "Group name must not be empty")
    h.core.loading = True
    assert describe(h, "g") == DescribedResource(GROUP, "g", E.coordinator_load_in_progress)
    assert alter(h, "g", ("share.delivery.count.limit", SET, "3")) == (
        E.coordinator_load_in_progress, None)
    assert h.records == []


@pytest.mark.parametrize(("policy", "expected"), [
    ("EARLIEST", gc.EARLIEST), (" by_duration:PT1M ", 10_000_000 - 60_000),
    ("by_duration:P1D", 0), ("by_duration:PT2H", 10_000_000 - 7_200_000),
    ("by_duration:", gc.LATEST), ("by_duration=PT1H", gc.LATEST)])  # fmt: skip
def test_reset_timestamp_reads_the_policy_as_kafka(policy: str, expected: int) -> None:
    assert gc.reset_timestamp(policy, 10_000_000) == expected


def test_a_duration_in_days_hours_minutes_and_seconds() -> None:
    day, wall = 86_400_000, 10**12
    assert gc.reset_timestamp("by_duration:P2DT3H4M5.5S", wall) == wall - (
        2 * day + 3 * 3_600_000 + 4 * 60_000 + 5_500)


def test_a_damaged_config_record_says_what_is_wrong() -> None:
    key, value = encode_record(Record(GroupConfigKey("g"), GroupConfigValue((("a", "b"),))))
    assert key == struct.pack(">hh", 105, 1) + b"g"
    assert value == struct.pack(">hih", 0, 1, 1) + b"a" + struct.pack(">h", 1) + b"b"
    cases = [
        (key, value[:-1], r"^group config string runs past the record$"),
        (key, value + b"x", r"^group config value has trailing bytes$"),
        (key, struct.pack(">hi", 1, 0), r"^unknown group config version 1$"),
        (key, struct.pack(">hih", 0, 1, -1), r"^group config string runs past the record$"),
        (key, value[:3], r"^bad group config value: "),
        (key + b"x", value, r"^group config key has trailing bytes$"),
        (key[:3], value, r"^bad group config key: "),
        (key, struct.pack(">hi", 0, -1), r"^negative group config count -1$"),
        (key, struct.pack(">hi", -1, 0), r"^unknown group config version -1$"),
        # A string length of -1 (0xFFFF), the 65535 bytes an unsigned reading would take there.
        (key, struct.pack(">hih", 0, 1, -1) + bytes(65535) + struct.pack(">h", 0),
         r"^group config string runs past the record$"),
    ]
    for k, v, message in cases:
        with pytest.raises(RecordDecodeError, match=message):
            decode_record(k, v)
    assert decode_record(struct.pack(">hh", 105, 0), None) == Record(GroupConfigKey(""), None)
    with pytest.raises(struct.error):  # no int16 length holds it: refused, never written
        encode_record(Record(GroupConfigKey("g"), GroupConfigValue((("a", "v" * 0x8000),))))


def test_every_resource_of_a_request_is_answered_in_order() -> None:
    h = Harness()
    request = DescribeGroupConfigs(((TOPIC, "orders", None), (GROUP, "", None),
                                    (GROUP, "g", ("share.delivery.count.limit",))))
    answers = h.call(request).results
    assert [(a.resource_type, a.resource_name, a.error) for a in answers] == [
        (TOPIC, "orders", E.invalid_request), (GROUP, "", E.invalid_request), (GROUP, "g", E.none)]
    h.core.loading = True
    loading = h.call(DescribeGroupConfigs(((GROUP, "a", None), (GROUP, "b", None)))).results
    assert [a.error for a in loading] == [E.coordinator_load_in_progress] * 2
