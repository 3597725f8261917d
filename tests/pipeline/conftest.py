"""The pipeline tests' shared Spark standalone cluster (issue 25): one master and one worker on
127.0.0.1, started once per test session from the installed pyspark and stopped at its end
(tests/support/spark_cluster.py). Skips when Java or pyspark is missing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.spark_cluster import ClusterUnavailable, StandaloneCluster


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
