"""`groupcoord audit --bootstrap-server ... --command-config FILE`: a fleet's history topic read
from a secured cluster. The secured cluster is a sidecar with a SASL_SSL listener in front of
tansu (tansu 0.6 itself cannot serve TLS): the driver's plan and an executor's read of every range
go over SCRAM-SHA-512 and TLS, the settings reach the executors through the Data Source's options
(the password under its own key), and without them the brokers cannot be read at all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from coordinator.core.events import MemberJoined
from coordinator.security.client import ClientSecurity
from coordinator.serve.history import HistorySettings
from coordinator.sidecar.history_topic import HistoryTopicOptions, TopicHistoryRecorder
from coordinator.tools import command_config
from tests.security import secure_util as su
from tests.security.test_groups_cli_secure import command_config as write_config
from tests.support import realclients as rc
from tests.support.sidecar_util import Stack, readyz, stack
from tests.support.tls import Certs

__all__ = ["stack"]

pyspark = pytest.importorskip("pyspark")
pytestmark = pytest.mark.clients


async def test_the_audit_reads_a_history_topic_over_sasl_ssl(
    stack: Stack, tmp_path: Path, certs: Certs, users_file: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pipeline.source import HistoryReader
    from pipeline.topic import TopicUnavailable, plan, range_rows

    tansu = stack.tansu()
    recorder = TopicHistoryRecorder(HistoryTopicOptions(tansu.bootstrap, "writer-a", partitions=2),
                                    HistorySettings(flush_interval_ms=50))
    recorder.start()
    for i in range(200):
        recorder.record(MemberJoined(f"g{i % 3}", f"m{i}", None, "c", "/h"))
    await rc.wait_until(lambda: recorder.written == 200, 30, "200 history entries written")
    await asyncio.to_thread(recorder.close)
    secured = stack.sidecar(tansu.bootstrap, *su.security_args("SASL_SSL", certs, users_file))
    await rc.wait_until(lambda: readyz(secured)[0] == 200, 20, "the secured sidecar")

    security = command_config.load(str(write_config(tmp_path, certs, "alice")))
    ranges = await asyncio.to_thread(plan, secured.bootstrap, security=security)
    assert ranges and all(r.bootstrap == secured.bootstrap for r in ranges)
    # The executors' side: the settings through the Data Source's options, then every range.
    settings, password = security.to_options()
    assert password not in settings
    reader: Any = HistoryReader({"security": settings, "security_password": password})
    assert reader.security.to_options() == (settings, password)
    rows = [row for r in ranges
            for row in await asyncio.to_thread(list, range_rows(r, security=reader.security))]
    assert len(rows) == 200 and {row[-1] for row in rows} == {"writer-a"}

    # Without the settings: nothing can be read (plaintext on a TLS port).
    with pytest.raises(TopicUnavailable):
        await asyncio.to_thread(plan, secured.bootstrap)
    wrong = ClientSecurity.create("SASL_SSL", "SCRAM-SHA-512", "alice", "wrong", str(certs.ca))
    with pytest.raises(TopicUnavailable):
        await asyncio.to_thread(plan, secured.bootstrap, security=wrong)

    # The CLI refuses a file it cannot honour before Spark starts.
    from coordinator.cli import main

    jks = write_config(tmp_path, certs, "alice", **{"ssl.truststore.type": "JKS"})
    code = await asyncio.to_thread(main, ["audit", "--bootstrap-server", secured.bootstrap,
                                          "--command-config", str(jks),
                                          "--out", str(tmp_path / "audit")])
    assert code == 2 and "PEM" in capsys.readouterr().err
    assert not (tmp_path / "audit").exists()
