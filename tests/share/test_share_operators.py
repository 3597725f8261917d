"""What an operator sees of a KIP-932 share group on a standalone groupcoord: the Prometheus
metrics (coordinator.serve.share_metrics), the status page's JSON (/groups) and `groupcoord
groups` (list, describe --members/--offsets/--state), before and after its offsets are reset,
and the group history the audit reads (its members joining and leaving)."""

from __future__ import annotations

import json
import signal
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from pipeline.segments import COLUMNS, find_segments, segment_rows
from tests.share.test_share_admin import alter_offsets, heartbeat
from tests.support import ops_util
from tests.support.realclients import wait_until
from tests.support.sidecar_util import RawClient


def cli(*args: str) -> Any:
    return ops_util.groupcoord_cli("groups", *args)


def metric(text: str, line_start: str) -> float:
    found = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
             if line.startswith(line_start)]
    assert len(found) == 1, (line_start, found)
    return found[0]


async def test_share_group_for_operators(tmp_path: Path) -> None:
    proc = ops_util.start(tmp_path, tmp_path / "data", {"t": 3}, metrics=True)
    try:
        client = await RawClient.connect(proc.port)
        member = str(uuid.uuid4())

        async def join() -> Any:  # retried as clients do while the server loads its log
            answer = await client.call(heartbeat("sg", member, 0, ("t",)))
            return None if answer.error_code == ErrorCode.coordinator_load_in_progress else answer

        joined = await wait_until(join, 30, "the server to load its log and answer")
        assert joined.error_code == ErrorCode.none

        text = proc.metrics_text()
        assert metric(text, 'groupcoord_share_groups{state="Stable"}') == 1
        assert metric(text, "groupcoord_share_group_members ") == 1
        assert metric(text, "groupcoord_share_partitions ") == 0

        url = f"http://127.0.0.1:{proc.metrics_port}/groups"
        with urllib.request.urlopen(url, timeout=5) as response:
            shown = [g for g in json.loads(response.read()) if g["group_id"] == "sg"]
        assert [(g["type"], g["state"], g["protocol"]) for g in shown] == [
            ("share", "Stable", "simple")]
        assert [(m["member_id"], m["assignment"]) for m in shown[0]["members"]] == [
            (member, {"t": [0, 1, 2]})]

        listed = cli("list", "--bootstrap-server", proc.bootstrap, "--type")
        assert listed.returncode == 0, listed.stderr
        assert ["sg", "share"] in [line.split()[:2] for line in listed.stdout.splitlines()]
        members = cli("describe", "sg", "--members", "--bootstrap-server", proc.bootstrap,
                      "--json")
        assert members.returncode == 0, members.stderr
        described = json.loads(members.stdout)[0]
        assert (described["type"], described["state"]) == ("share", "Stable")
        assert [m["member_id"] for m in described["members"]] == [member]

        assert (await client.call(heartbeat("sg", member, -1))).error_code == ErrorCode.none
        reset = await client.call(alter_offsets("sg", {"t": {0: 5, 1: 7}}))
        assert reset.error_code == ErrorCode.none
        text = proc.metrics_text()
        assert metric(text, 'groupcoord_share_groups{state="Empty"}') == 1
        assert metric(text, "groupcoord_share_partitions ") == 2
        offsets = cli("describe", "sg", "--offsets", "--bootstrap-server", proc.bootstrap,
                      "--json")
        assert offsets.returncode == 0, offsets.stderr
        rows = json.loads(offsets.stdout)[0]["offsets"]
        assert [(r["topic"], r["partition"], r["current_offset"]) for r in rows] == [
            ("t", 0, 5), ("t", 1, 7)]
        client.close()
        proc.signal(signal.SIGTERM)  # a clean stop writes the queued history
        proc.proc.wait(30)
    finally:
        proc.kill()
    # The history has the share member's join and leave, and the audit's decoder reads them.
    at = {name: i for i, (name, _) in enumerate(COLUMNS)}
    rows = [r for ref in find_segments([tmp_path / "data"]) for r in segment_rows(ref)]
    seen = [(r[at["event"]], r[at["member_id"]]) for r in rows if r[at["group_id"]] == "sg"]
    assert ("member_joined", member) in seen and ("member_left", member) in seen, seen
