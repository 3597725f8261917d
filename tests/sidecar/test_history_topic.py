"""The fleet's history topic (issue 25), without a broker: its partitioner is Kafka's default for
keyed records (so a group's events stay in one partition, the one a Java producer would pick), and
its configs carry the local history's retention. The writer itself runs against tansu and Kafka
4.4 (idempotent there) in tests/pipeline/test_audit_fleet.py."""

from __future__ import annotations

from coordinator.serve.history import HistorySettings
from coordinator.sidecar.history_topic import partition_for, topic_configs


def test_the_partitioner_is_kafkas_murmur2() -> None:
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2: murmur2(key) as Java's signed int.
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, java in vectors.items():
        for partitions in (1, 7, 10, 50):
            assert partition_for(key, partitions) == (java & 0x7FFFFFFF) % partitions, key


def test_topic_configs_carry_the_history_retention_per_partition() -> None:
    week, gib = 7 * 24 * 3_600_000, 1 << 30
    configs = topic_configs(HistorySettings(retention_ms=week, retention_bytes=gib), 10)
    assert configs == {
        "cleanup.policy": "delete",
        "retention.ms": str(week),
        "retention.bytes": str(gib // 10),  # Kafka applies retention.bytes per partition
        "segment.bytes": str(16 << 20),  # --history-segment-bytes, under a quarter of that
        "segment.ms": str(3_600_000),  # a tenth of the retention, at most an hour
    }
    small = topic_configs(HistorySettings(retention_ms=60_000, retention_bytes=40 << 20), 10)
    assert small["retention.bytes"] == str(4 << 20)
    assert small["segment.bytes"] == str(1 << 20)  # a quarter of 4 MiB is Kafka's minimum
    assert small["segment.ms"] == "6000"
