"""Issue 24, item 6: messages that name the right setting, or the API by name, once per client.

Real processes and real sockets: `groupcoord serve` started on a data dir it cannot use, an old
client (kafka-python pinned to api_version 0.9) against a running server, the TOML check, the
`--version` flag, and the audit given a filter that matches nothing."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import threading
from argparse import Namespace
from pathlib import Path

import pytest

from coordinator.serve.lifecycle import OncePerKey
from pipeline.cli import _filters_match_nothing
from pipeline.segments import find_segments
from pipeline.synthetic import write_synthetic
from tests.support import ops_util
from tests.support import realclients as rc

# -- the data dir --------------------------------------------------------------------------------


def serve(data_dir: Path, *prefix: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "coordinator.cli", "serve", "--listen", "127.0.0.1:0",
         "--metrics-listen", "", "--data-dir", str(data_dir)],
        check=False, capture_output=True, text=True, timeout=30, cwd=ops_util.REPO,
    )  # fmt: skip


def last_line(out: subprocess.CompletedProcess[str]) -> str:
    lines = out.stderr.strip().splitlines()
    assert lines, out
    return lines[-1]


def unprivileged() -> list[str]:
    """A command prefix under which file permissions apply: none for an ordinary user; for root,
    setpriv without the capabilities that bypass them (CAP_DAC_OVERRIDE and friends)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: a read-only directory would not be")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner"]


def test_a_read_only_data_dir_holding_a_log_names_the_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = ops_util.start(tmp_path, data, {"t": 1})  # leaves a log behind
    proc.kill()
    assert any(data.glob("*.log"))
    paths = [data, *data.rglob("*")]
    try:
        for path in paths:
            path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        out = serve(data, *unprivileged())
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    assert out.returncode == 2, out.stderr
    line = last_line(out)
    assert line.startswith(f"groupcoord: --data-dir: {data} is not writable"), line
    assert "--listen" not in out.stderr and "permission denied" in line


def test_a_data_dir_that_is_a_file_says_so(tmp_path: Path) -> None:
    a_file = tmp_path / "data"
    a_file.write_text("not a directory")
    out = serve(a_file)
    assert out.returncode == 2, out.stderr
    assert last_line(out) == (
        f"groupcoord: --data-dir: {a_file} is a file, not a directory (name a directory; it is "
        "created if missing)"
    )
    assert "Errno" not in out.stderr
    out = serve(a_file / "below")
    assert out.returncode == 2, out.stderr
    assert f"{a_file / 'below'} is under {a_file}, a file" in last_line(out)


# -- an old client -------------------------------------------------------------------------------


@pytest.mark.clients
def test_an_old_client_is_named_once_with_the_api_by_name(tmp_path: Path) -> None:
    """kafka-python pinned to 0.9 asks for ListOffsets v0 (groupcoord serves v1+), is closed,
    reconnects and asks again: many refusals, one WARNING line naming the API and the client."""
    from kafka import KafkaConsumer

    proc = ops_util.start(tmp_path, tmp_path / "data", {"t": 1}, metrics=True)
    stop = threading.Event()
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            consumer = KafkaConsumer(
                "t", bootstrap_servers=proc.bootstrap, group_id="old", client_id="old-client",
                api_version=(0, 9), reconnect_backoff_ms=20, reconnect_backoff_max_ms=50,
            )  # fmt: skip
            try:
                while not stop.is_set():
                    consumer.poll(timeout_ms=100)
            finally:
                consumer.close()
        except BaseException as exc:  # surfaced by the assertions below
            errors.append(exc)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    try:

        def refused() -> float:
            text = proc.metrics_text()
            prefix = "groupcoord_connections_protocol_errors_total "
            (line,) = [x for x in text.splitlines() if x.startswith(prefix)]
            return float(line.split()[-1])

        rc.wait_until_sync(lambda: refused() >= 10, 30, "ten refused connections")
    finally:
        stop.set()
        thread.join(15)
        proc.kill()
    warnings = [line for line in proc.log().splitlines() if " WARNING " in line]
    assert len(warnings) == 1, warnings
    assert "refusing ListOffsets v0 from 127.0.0.1 (client id 'old-client')" in warnings[0]
    assert "serves ListOffsets v1-" in warnings[0]
    assert "unsupported API 2" not in proc.log()


def test_repeats_are_counted_and_reported_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    once = OncePerKey(logging.getLogger("t.once"), interval_s=60, max_keys=2, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t.once"):
        assert once.log("a", "refusing %s", "x")
        for _ in range(5):
            now[0] += 1
            assert not once.log("a", "refusing %s", "x")
        assert once.log("b", "refusing %s", "y")  # another client: its own line
        now[0] = 61.0
        assert once.log("a", "refusing %s", "x")
        assert not once.log("a", "refusing %s", "x")
        once.log("c", "refusing %s", "z")  # a third key: the oldest ("a") is forgotten
        assert once.log("a", "refusing %s", "x")
    assert [r.getMessage() for r in caplog.records] == [
        "refusing x",
        "refusing y",
        "refusing x (and 5 more times in the last 61 s, not logged)",
        "refusing z",
        "refusing x",
    ]


# -- the TOML check, --version -------------------------------------------------------------------


def test_every_unknown_key_is_reported_with_the_closest_known_one(tmp_path: Path) -> None:
    path = tmp_path / "groupcoord.toml"
    path.write_text(
        'lisen = "127.0.0.1:0"\nsession_timeout_min_ms = 6000\nhistory-retention = 5\nzzzz = 1\n'
    )
    out = ops_util.groupcoord_cli("serve", "--config", str(path))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == (
        f"groupcoord: lisen in {path}: unknown setting (did you mean listen?); "
        f"history_retention in {path}: unknown setting (did you mean history_retention_ms?); "
        f"zzzz in {path}: unknown setting"
    )


def test_version_is_the_installed_package_version() -> None:
    from importlib.metadata import version

    out = ops_util.groupcoord_cli("--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"groupcoord {version('groupcoord')}"


# -- the audit -----------------------------------------------------------------------------------


def test_an_audit_filter_that_matches_nothing_fails_and_writes_nothing(tmp_path: Path) -> None:
    write_synthetic(tmp_path / "data" / "history", 2_000, groups=5)  # group-0000 .. group-0004
    out_dir = tmp_path / "audit"
    args = ("audit", "--data-dir", str(tmp_path / "data"), "--out", str(out_dir))
    out = ops_util.groupcoord_cli(*args, "--group", "groop-0003")
    assert out.returncode == 1, out
    assert out.stderr.strip() == (
        "groupcoord audit: no event matches --group groop-0003 in 1 history segment(s); groups "
        "in that history: group-0000, group-0001, group-0002, group-0003, group-0004; did you "
        "mean group-0003?; nothing written (a sidecar fleet keeps its history on the upstream "
        "cluster's --history-topic: read it with --bootstrap-server HOST:PORT)"
    )
    assert not out_dir.exists()
    out = ops_util.groupcoord_cli(*args, "--since", "2099-01-01")
    assert out.returncode == 1, out
    assert "no event matches --since 2099-01-01 in 1 history segment(s)" in out.stderr
    assert not out_dir.exists()
    # A filter that matches goes on to Spark (not started here): the check lets it through.
    segments = find_segments([tmp_path / "data"])
    matching = Namespace(group=["nosuch", "group-0003"], since=None, until=None)
    assert _filters_match_nothing(matching, segments, None, None) is None
