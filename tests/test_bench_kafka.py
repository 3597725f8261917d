"""The bench's model of Kafka's group -> __consumer_offsets partition mapping (bench/scenario_kafka
waits for every offsets partition to load before it measures Kafka, by one group per partition)."""

from bench.scenario_kafka import java_hash, offsets_partition


def test_java_hash_matches_string_hashcode() -> None:
    assert java_hash("") == 0
    assert java_hash("hello") == 99162322  # "hello".hashCode() in Java
    assert java_hash("Hello World") == -862545276  # wraps to a negative int as Java's does
    assert java_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE


def test_offsets_partition_as_kafka_computes_it() -> None:
    # Utils.abs(hashCode) % partitions; Utils.abs(Integer.MIN_VALUE) is 0, not MIN_VALUE.
    assert offsets_partition("hello", 50) == 99162322 % 50
    assert offsets_partition("polygenelubricants", 50) == 0
    assert offsets_partition("Hello World", 50) == 862545276 % 50
