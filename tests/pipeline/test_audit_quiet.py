"""The audit's Spark starts without the JVM's start-up chatter on stderr: Spark's default log4j
profile printed four lines (its name, "Setting default log level" twice, a native-hadoop WARN) on
every run, before the session could lower its level."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.spark_cluster import shutdown_spark_gateway

pytest.importorskip("pyspark")

# Spark (local[2] in one driver JVM) loads the whole machine: its tests run in the "heavy" group,
# one after another on one worker (tests/conftest.py, "parallel runs"), which also starts the
# package's driver JVM and the session's standalone cluster once, not once per worker.
pytestmark = pytest.mark.xdist_group("heavy")


def test_a_session_starts_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    from pyspark import SparkContext

    from pipeline import audit

    if SparkContext._active_spark_context is not None:  # another module's session: not a start
        pytest.skip("a Spark session is already running in this process")
    # The package's driver JVM, kept up between sessions (conftest.py), ends first: this session
    # starts a JVM, which is what prints the start-up chatter.
    shutdown_spark_gateway()
    session: Any = audit.spark_session("local[1]", {"spark.sql.shuffle.partitions": "1"})
    try:
        assert session.range(3).count() == 3
    finally:
        session.stop()
        shutdown_spark_gateway()
    err = capfd.readouterr().err
    for noise in ("log4j profile", "Setting default log level", "NativeCodeLoader",
                  "setLogLevel"):
        assert noise not in err, err
