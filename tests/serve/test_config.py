"""Configuration: one table -> flags, GROUPCOORD_* env vars, TOML keys; precedence flag > env >
file > default; one error line naming the setting (as the user wrote it) and exit code 2 for each
kind of bad value."""

from __future__ import annotations

import socket
import tomllib
from pathlib import Path

import pytest

from coordinator import cli
from coordinator.serve import config
from coordinator.serve.config import ConfigError
from tests.support import ops_util

REPO = Path(__file__).resolve().parents[2]


def resolve(argv: list[str], env: dict[str, str] | None = None) -> config.Settings:
    args = cli.build_parser().parse_args(["serve", *argv])
    return config.resolve(args, env or {})


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "groupcoord.toml"
    path.write_text(text)
    return str(path)


# -- the table -------------------------------------------------------------------------------------


def test_names_are_derived_and_unique() -> None:
    flags = [s.flag for s in config.SETTINGS]
    envs = [s.env for s in config.SETTINGS]
    assert len(set(flags)) == len(flags) and len(set(envs)) == len(envs)
    listen = next(s for s in config.SETTINGS if s.name == "session_timeout_min_ms")
    assert listen.flag == "--session-timeout-min-ms"
    assert listen.env == "GROUPCOORD_SESSION_TIMEOUT_MIN_MS"
    assert listen.key == "session_timeout_min_ms"


def test_defaults_pass_their_own_validation() -> None:
    settings = resolve([])
    for s, value, source in settings.items():
        assert source == "default"
        assert value == s.default


def test_help_documents_every_setting_with_default_and_env() -> None:
    text = " ".join(ops_util.groupcoord_cli("serve", "--help").stdout.split())
    for s in config.SETTINGS:
        assert s.flag in text
        assert f"(default: {s.shown_default()}; env {s.env})" in text, s.name


# -- precedence ------------------------------------------------------------------------------------


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'max_group_size = 10\ninitial-rebalance-delay-ms = 11\nlog_format = "json"\n'
        'topic = ["a:1"]\nmetrics_per_group = true\n',
    )
    env = {"GROUPCOORD_MAX_GROUP_SIZE": "20", "GROUPCOORD_TOPIC": "b:2, c:3",
           "GROUPCOORD_SESSION_TIMEOUT_MIN_MS": "2000"}  # fmt: skip
    s = resolve(["--config", path, "--max-group-size", "30", "--no-metrics-per-group"], env)
    assert (s.max_group_size, s.source("max_group_size")) == (30, "flag")
    assert (s.topic, s.source("topic")) == (("b:2", "c:3"), "env")  # a list is replaced whole
    assert (s.session_timeout_min_ms, s.source("session_timeout_min_ms")) == (2000, "env")
    assert (s.initial_rebalance_delay_ms, s.source("initial_rebalance_delay_ms")) == (11, "file")
    assert (s.log_format, s.source("log_format")) == ("json", "file")
    assert (s.metrics_per_group, s.source("metrics_per_group")) == (False, "flag")
    assert (s.fsync, s.source("fsync")) == ("always", "default")


def test_repeated_flag_builds_a_list_and_overrides_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'topic = ["a:1", "b:1"]\n')
    s = resolve(["--config", path, "--topic", "x:3", "--topic", "y:4"])
    assert s.topic == ("x:3", "y:4")
    assert resolve(["--config", path]).topic == ("a:1", "b:1")


def test_config_file_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, 'data_dir = "/srv/gc"\n')
    s = resolve([], {"GROUPCOORD_CONFIG": path})
    assert s.data_dir == "/srv/gc" and s.origin("data_dir") == f"data_dir in {path}"


def test_env_booleans_and_empty_metrics_listen() -> None:
    for text, expected in (("true", True), ("1", True), ("off", False), ("No", False)):
        assert resolve([], {"GROUPCOORD_METRICS_PER_GROUP": text}).metrics_per_group is expected
    assert resolve(["--metrics-listen", ""]).metrics_listen == ""


def test_print_config_round_trips(tmp_path: Path) -> None:
    out = ops_util.groupcoord_cli(
        "serve", "--print-config", "--topic", "a:3", "--max-group-size", "7", "--metrics-per-group"
    )
    assert out.returncode == 0, out.stderr
    data = tomllib.loads(out.stdout)
    assert data["topic"] == ["a:3"] and data["max_group_size"] == 7
    assert data["metrics_per_group"] is True
    again = resolve(["--config", write(tmp_path, out.stdout)])
    assert again.topic == ("a:3",) and again.max_group_size == 7 and again.metrics_per_group


# -- one line per bad value, naming the setting where it came from --------------------------------

BAD_FLAGS = [
    (["--max-group-size", "ten"], "--max-group-size: expected an integer, got 'ten'"),
    (["--max-group-size", "0"], "--max-group-size: must be >= 1, got 0"),
    (["--initial-rebalance-delay-ms", "-1"], "--initial-rebalance-delay-ms: must be >= 0, got -1"),
    (["--max-frame-bytes", "8"], "--max-frame-bytes: must be >= 64, got 8"),
    (["--listen", "localhost"], "--listen: expected HOST:PORT, got 'localhost'"),
    (["--listen", "h:99999"], "--listen: port must be 0-65535, got 99999"),
    (["--metrics-listen", "h:x"], "--metrics-listen: port must be an integer, got 'x'"),
    (["--fsync", "sometimes"], "--fsync: fsync policy must be 'always' or 'interval:<ms>'"),
    (["--fsync", "interval:0"], "--fsync: fsync policy must be"),
    (["--topic", "orders"], "--topic: topic 'orders': expected NAME:PARTITIONS"),
    (["--topic", "orders:0"], "--topic: topic 'orders:0': partitions must be between 1"),
    (["--topic", "a:1", "--topic", "a:2"], "--topic: topic 'a' declared twice"),
    (["--topic-hash", "md5"], "--topic-hash: must be one of murmur3, xxh3, got 'md5'"),
    (["--log-format", "xml"], "--log-format: must be one of plain, json, got 'xml'"),
    (["--log-level", "LOUD"], "--log-level: must be one of DEBUG, INFO, WARNING, ERROR"),
    (["--data-dir", ""], "--data-dir: must not be empty"),
    (["--session-timeout-min-ms", "9000", "--session-timeout-max-ms", "8000"],
     "--session-timeout-max-ms: must be >= session_timeout_min_ms (9000), got 8000"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "line"), BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_flag_value_is_one_line_and_exit_2(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"groupcoord: {line}"), err


BAD_ENV = [
    ({"GROUPCOORD_MAX_GROUP_SIZE": "many"}, "GROUPCOORD_MAX_GROUP_SIZE: expected an integer"),
    ({"GROUPCOORD_SESSION_TIMEOUT_MIN_MS": "0"}, "GROUPCOORD_SESSION_TIMEOUT_MIN_MS: must be >= 1"),
    ({"GROUPCOORD_METRICS_PER_GROUP": "perhaps"},
     "GROUPCOORD_METRICS_PER_GROUP: expected true or false, got 'perhaps'"),
    ({"GROUPCOORD_TOPIC_HASH": "sha1"}, "GROUPCOORD_TOPIC_HASH: must be one of murmur3, xxh3"),
    ({"GROUPCOORD_TOPIC": "a:1,b"}, "GROUPCOORD_TOPIC: topic 'b': expected NAME:PARTITIONS"),
]  # fmt: skip


@pytest.mark.parametrize(("env", "line"), BAD_ENV, ids=[next(iter(e)) for e, _ in BAD_ENV])
def test_bad_env_value_names_the_variable(env: dict[str, str], line: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve([], env)
    assert str(info.value).startswith(line)
    assert "\n" not in str(info.value)


BAD_FILES = [
    ("max_group_size = \"10\"\n", "max_group_size in {path}: expected an integer, got '10'"),
    ("max_group_size = 0\n", "max_group_size in {path}: must be >= 1, got 0"),
    ("metrics_per_group = 1\n", "metrics_per_group in {path}: expected true or false, got 1"),
    ("topic = \"a:1\"\n", "topic in {path}: expected an array of strings, got 'a:1'"),
    ("listen = 9092\n", "listen in {path}: expected a string, got 9092"),
    ("log_format = \"yaml\"\n", "log_format in {path}: must be one of plain, json, got 'yaml'"),
    ("lisen = \"h:1\"\n", "lisen in {path}: unknown setting"),
    ("listen = \n", "config file {path}: not valid TOML"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "line"), BAD_FILES, ids=[t.strip() for t, _ in BAD_FILES])
def test_bad_file_value_names_key_and_file(tmp_path: Path, text: str, line: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        resolve(["--config", path])
    assert str(info.value).startswith(line.format(path=path)), str(info.value)
    assert "\n" not in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match=r"^config file .*absent\.toml: No such file"):
        resolve(["--config", path])


def test_cross_check_names_the_source_of_the_offending_value(tmp_path: Path) -> None:
    path = write(tmp_path, "session_timeout_max_ms = 100\n")
    with pytest.raises(ConfigError, match=rf"^session_timeout_max_ms in {path}: must be >= "):
        resolve(["--config", path])


FLEET = ["--upstream", "127.0.0.1:9092"]  # --state upstream, the default: a fleet member
TLS_FILES = ["--ssl-certfile", "member.pem", "--ssl-keyfile", "member.key"]


def test_a_secured_fleet_needs_tls_between_members_and_a_ca() -> None:
    # Members authenticate each other by certificate (coordinator.sidecar.fleet_tls).
    with pytest.raises(ConfigError, match=r"^--security-protocol: SASL_PLAINTEXT cannot secure "
                                          r"a sidecar fleet: .* use SASL_SSL"):  # fmt: skip
        resolve([*FLEET, "--security-protocol", "SASL_PLAINTEXT"])
    for protocol in ("SSL", "SASL_SSL"):
        with pytest.raises(ConfigError, match=rf"^fleet_ssl_cafile \(default\): is required with "
                                              rf"security_protocol {protocol} in a sidecar "
                                              r"fleet"):  # fmt: skip
            resolve([*FLEET, "--security-protocol", protocol, *TLS_FILES])
    # Either CA setting will do; a single sidecar (--state local) and PLAINTEXT are unchanged.
    for ca in (["--fleet-ssl-cafile", "fleet-ca.pem"], ["--ssl-cafile", "ca.pem"]):
        resolve([*FLEET, "--security-protocol", "SASL_SSL", *TLS_FILES, *ca])
    resolve([*FLEET, "--security-protocol", "SASL_PLAINTEXT", "--state", "local"])
    resolve([*FLEET, "--security-protocol", "SSL", *TLS_FILES, "--state", "local"])
    resolve(["--security-protocol", "SASL_PLAINTEXT"])  # standalone
    resolve(FLEET)


def test_a_sasl_plaintext_fleet_refuses_to_start(capsys: pytest.CaptureFixture[str]) -> None:
    # (--print-config: were the check missing, the test would not start a server and hang)
    argv = ["serve", *FLEET, "--security-protocol", "SASL_PLAINTEXT", "--print-config"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("groupcoord: --security-protocol: SASL_PLAINTEXT cannot secure"), err


# -- resources named by settings: a real process, one line, exit 2 --------------------------------


def test_unusable_data_dir_and_busy_port_stop_startup(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    out = ops_util.groupcoord_cli(
        "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", str(not_a_dir)
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(
        f"groupcoord: --data-dir: {not_a_dir} is a file"
    )  # tests/serve/test_messages.py has the other cases

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = ops_util.groupcoord_cli(
            "serve", "--metrics-listen", "", "--data-dir", str(tmp_path / "d"),
            env={"GROUPCOORD_LISTEN": f"127.0.0.1:{port}"},
        )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert (
        out.stderr.strip()
        .splitlines()[-1]
        .startswith("groupcoord: GROUPCOORD_LISTEN: cannot listen")
    )


def test_settings_reach_the_server_options() -> None:
    s = resolve(
        ["--listen", "[::1]:19092", "--advertised-host", "gc.example", "--max-frame-bytes", "4096",
         "--session-timeout-min-ms", "1000", "--session-timeout-max-ms", "2000",
         "--initial-rebalance-delay-ms", "0", "--max-group-size", "5",
         "--offsets-retention-minutes", "3", "--offsets-retention-check-interval-ms", "500",
         "--topic", "orders:12"]
    )  # fmt: skip
    options, catalog = cli.options_from_settings(s)
    assert (options.host, options.port, options.advertised_host) == ("::1", 19092, "gc.example")
    assert options.max_frame_bytes == 4096
    c = options.coordinator
    assert (c.session_timeout_min_ms, c.session_timeout_max_ms) == (1000, 2000)
    assert (c.initial_rebalance_delay_ms, c.max_group_size) == (0, 5)
    assert c.offsets_retention_ms == 3 * 60_000
    assert c.offsets_retention_check_interval_ms == 500
    assert catalog.partition_count("orders") == 12


def test_the_core_config_comes_from_the_settings_table() -> None:
    from coordinator.core.effects import CoordinatorConfig
    from coordinator.serve.config import SETTINGS, Settings, coordinator_config

    settings = Settings(SETTINGS)
    # The table's defaults are the core's (Kafka's): nothing drifts between the two.
    assert coordinator_config(settings) == CoordinatorConfig()
    for name, value in (("session_timeout_min_ms", 1_000), ("max_group_size", 7),
                        ("topic_hash", "xxh3"), ("offsets_retention_minutes", 2)):
        settings.set(name, value, "flag")
    got = coordinator_config(settings)
    assert (got.session_timeout_min_ms, got.max_group_size, got.topic_hash) == (1_000, 7, "xxh3")
    assert got.offsets_retention_ms == 120_000
