"""The pipeline tests' shared Spark standalone cluster (issue 25): one master and one worker on
127.0.0.1, started once per test session from the installed pyspark and stopped at its end
(tests/support/spark_cluster.py). Skips when Java or pyspark is missing.

And one Spark driver JVM (py4j's gateway) for the package: a test's session is stopped at its end,
the JVM is not, so the next session (test_audit.py's, then the fleet test's audits) starts in a
JVM that is up and warm. Its first start and its first queries cost about a minute on a loaded
machine, a later session's queries seconds. The JVM ends with the package: the rest of the suite
gets the memory back."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.support.spark_cluster import ClusterUnavailable, StandaloneCluster


@pytest.fixture(scope="package", autouse=True)
def _spark_driver_jvm() -> Iterator[None]:
    yield
    from tests.support.spark_cluster import shutdown_spark_gateway

    with contextlib.suppress(ImportError):  # no pyspark: no JVM either
        shutdown_spark_gateway()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.start()
    except ClusterUnavailable as exc:
        cluster.stop()
        pytest.skip(str(exc))
    except BaseException:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        cluster.stop()
