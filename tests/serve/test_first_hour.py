"""What a newcomer trips on in the first hour, each through the real CLI or a real client: names a
Kafka cluster would refuse, a Produce refused without a word, a typo'd dump directory, a wildcard
listen advertising "localhost", and a fleet whose plaintext listener would skip the ACLs."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from coordinator.sidecar.fleet import FLEET_PORT, fleet_listen_address
from tests.support import ops_util
from tests.support import realclients as rc

ILLEGAL = "a character other than ASCII alphanumerics, '.', '_' and '-'"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("bad topic!:3", f'Topic name "bad topic!" is illegal, it contains {ILLEGAL}'),
        ("x" * 300 + ":3", "Topic name is illegal, it can't be longer than 249 characters"),
        ("..:3", 'Topic name cannot be "." or ".."'),
    ],
    ids=["characters", "length", "dots"],
)
def test_a_topic_name_kafka_refuses_is_refused_at_start(
    tmp_path: Path, spec: str, reason: str
) -> None:
    out = ops_util.groupcoord_cli(
        "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir",
        str(tmp_path / "d"), "--topic", spec,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith(f"groupcoord: --topic: topic {spec!r}: {reason}"), line


def test_log_dump_of_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    out = ops_util.groupcoord_cli("log", "dump", str(missing))
    assert out.returncode == 1, out
    assert out.stdout == ""
    assert out.stderr.strip() == f"groupcoord log dump: no such directory: {missing}"


def test_a_refused_produce_is_explained_in_the_log_once(tmp_path: Path) -> None:
    """confluent-kafka shows only "Broker: Invalid request"; the reason is in our log, once."""
    from confluent_kafka import KafkaError, Producer

    broker = ops_util.start(tmp_path, tmp_path / "d", {"orders": 2})
    try:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "client.id": "first-hour", "retries": 0, "linger.ms": 0})
        errors: list[KafkaError] = []
        for i in range(3):
            producer.produce("orders", key=b"k", value=b"%d" % i,
                             on_delivery=lambda err, _msg: errors.append(err))
            producer.flush(20)
        assert [e.code() for e in errors] == [KafkaError.INVALID_REQUEST] * 3, errors
        lines = [ln for ln in broker.log().splitlines() if "refusing Produce" in ln]
        assert len(lines) == 1, broker.log()
        assert "to orders from 127.0.0.1 (client id 'first-hour')" in lines[0]
        assert "standalone mode stores no records" in lines[0]
    finally:
        broker.kill()


async def test_a_wildcard_listen_advertises_the_host_name_and_says_so(tmp_path: Path) -> None:
    from kafka import KafkaAdminClient

    port = rc.free_port()
    cmd = rc.groupcoord_command(port, tmp_path / "d", {"orders": 1},
                                {"metrics_listen": ""}, ["--listen", f"0.0.0.0:{port}"])
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=rc.REPO, start_new_session=True)
    try:
        await rc.wait_until(lambda: proc.poll() is not None or rc.can_connect("127.0.0.1", port),
                            20, "the server to listen")
        host = socket.gethostname()
        await rc.wait_until(lambda: "advertising this machine's host name" in
                            log_path.read_text(), 10, "the warning")
        assert f"host name {host!r}" in log_path.read_text()
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=5000)
        try:
            brokers = admin.describe_cluster()["brokers"]
        finally:
            admin.close()
        assert [(b["host"], b["port"]) for b in brokers] == [(host, port)]
    finally:
        proc.kill()
        proc.wait(10)


def test_a_wildcard_advertised_host_is_refused(tmp_path: Path) -> None:
    out = ops_util.groupcoord_cli(
        "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir",
        str(tmp_path / "d"), "--advertised-host", "0.0.0.0",
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        "groupcoord: --advertised-host: '0.0.0.0' is no address a client can connect to"
    )


def test_acls_in_a_fleet_need_the_mutual_tls_fleet_listener(tmp_path: Path) -> None:
    out = ops_util.groupcoord_cli(
        "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir",
        str(tmp_path / "d"), "--upstream", "127.0.0.1:1", "--authorizer", "acl",
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        "groupcoord: --authorizer: acl in a sidecar fleet needs a mutual-TLS fleet listener"
    )
    # A single sidecar (no fleet listener) may use ACLs over PLAINTEXT, as standalone may.
    settings = ops_util.groupcoord_cli(
        "serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), "--upstream",
        "127.0.0.1:1", "--authorizer", "acl", "--state", "local", "--print-config",
    )  # fmt: skip
    assert settings.returncode == 0, settings.stderr


def test_the_fleet_listener_binds_where_it_is_advertised_not_everywhere() -> None:
    assert fleet_listen_address("", None, "127.0.0.1:9092") == ("127.0.0.1", FLEET_PORT)
    assert fleet_listen_address("", ("10.1.2.3", 9094), "127.0.0.1:9092") == ("10.1.2.3", 9094)
    assert fleet_listen_address("0.0.0.0:9500", None, "127.0.0.1:9092") == ("0.0.0.0", 9500)


def test_a_mistyped_flag_gets_a_suggestion_from_its_own_command() -> None:
    out = ops_util.groupcoord_cli("serve", "--lisen", "127.0.0.1:0")
    assert out.returncode == 2
    assert "(--lisen: did you mean --listen?)" in out.stderr, out.stderr
    # groups' --bootstrap-server is not offered to serve, where it means nothing.
    out = ops_util.groupcoord_cli("serve", "--bootstrap-servr", "x")
    assert out.returncode == 2 and "did you mean" not in out.stderr, out.stderr


def test_a_busy_port_is_named(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = ops_util.groupcoord_cli(
            "serve", "--listen", f"127.0.0.1:{port}", "--metrics-listen", "",
            "--data-dir", str(tmp_path / "d"),
        )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        f"groupcoord: --listen: cannot listen on 127.0.0.1:{port}: "
    ), out.stderr


def test_the_build_is_a_metric(tmp_path: Path) -> None:
    from coordinator.serve.lifecycle import installed_version

    broker = ops_util.start(tmp_path, tmp_path / "d", {"orders": 1}, metrics=True)
    try:
        text = broker.metrics_text()
    finally:
        broker.kill()
    line = next(ln for ln in text.splitlines() if ln.startswith("groupcoord_build_info{"))
    assert f'version="{installed_version()}"' in line and line.endswith(" 1.0"), line


async def test_log_dump_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`groupcoord log dump ./data | head`: no BrokenPipeError traceback when head is done."""
    import sys

    from storage.disk import DiskLog

    log = await DiskLog.open(tmp_path)
    for i in range(3000):  # more than a pipe buffer of dump lines
        await log.append_durable([(b"\x00\x63junk%d" % i, b"?")])
    await log.close()
    proc = subprocess.Popen([sys.executable, "-m", "coordinator.cli", "log", "dump", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=rc.REPO)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"Dumping ")
    proc.stdout.close()  # what head does after its lines
    err = proc.stderr.read().decode()
    assert proc.wait(30) == 0 and "Traceback" not in err, err
