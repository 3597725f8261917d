"""deploy/ and the Dockerfile, checked statically (no container engine runs here: the image is
never built in the tests) and against a real `groupcoord serve`:

- every YAML and JSON file under deploy/ parses; Kubernetes objects are well-formed; every
  `groupcoord serve` command line, TOML config and GROUPCOORD_* variable in them is accepted by
  the settings table (a renamed flag breaks this test, not a deployment);
- the sidecar Deployment and deploy/docker-compose.fleet.yml run a sidecar fleet (docs "Sidecar
  fleet"): state upstream, each member advertising an address the others reach (the pod IP from
  the downward API; the compose service name) on the declared fleet port;
- every metric the Grafana dashboard queries is exported by a running server's /metrics after a
  small scenario (join, sync, commit, leave), with the labels the queries group by; the sidecar
  panels' (upstream, lag) by a sidecar in front of a real tansu and of Kafka 4.4, after traffic
  through it;
- each manifest sizes the rebalance history to its volume (with room to spare), and nothing
  names a namespace: the StatefulSet's address comes from its own (the downward API);
- the Dockerfile's CMD is the console script the tests run (`coordinator.cli:main`), its ENV
  resolves to a listener on 0.0.0.0 and the data volume, and its HEALTHCHECK one-liner passes
  against a running server and fails without one.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench import wire
from coordinator import cli
from coordinator.serve import addresses, config
from tests.support import ops_util
from tests.support import realclients as rc
from tests.support.durability_util import RawConn
from tests.support.sidecar_util import (
    Stack,
    Upstream,
    commit,
    create_topic,
    produce,
    stack,
    upstream,
)

__all__ = ["stack", "upstream"]  # the fixtures

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "groupcoord.json"


def yaml_files() -> list[Path]:
    return sorted([*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")])


def manifests() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def serve_settings(argv: list[str], env: dict[str, str] | None = None) -> config.Settings:
    """What `groupcoord serve ARGV` resolves to; fails the test on an unknown flag or bad value."""
    assert argv[:2] == ["groupcoord", "serve"], argv
    parser = cli.build_parser()
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"groupcoord does not accept {shlex.join(argv)}")
    return config.resolve(args, env or {})


# -- everything parses ---------------------------------------------------------------------------


def test_every_yaml_and_json_file_parses() -> None:
    files = yaml_files()
    assert len(files) >= 6, files
    for path in files:
        docs = list(yaml.safe_load_all(path.read_text()))
        assert docs and all(isinstance(d, dict) for d in docs if d is not None), path
    jsons = sorted(DEPLOY.rglob("*.json"))
    assert DASHBOARD in jsons
    for path in jsons:
        json.loads(path.read_text())


def test_kubernetes_objects_are_well_formed() -> None:
    docs = manifests()
    kinds = {d["kind"] for d in docs}
    assert {"StatefulSet", "Service", "ConfigMap", "Deployment"} <= kinds
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"], d
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    claims = statefulset["spec"]["volumeClaimTemplates"]
    mounts = statefulset["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {c["metadata"]["name"] for c in claims} <= {m["name"] for m in mounts}
    service = next(d for d in docs if d["kind"] == "Service")
    assert {p["port"] for p in service["spec"]["ports"]} == {9092, 9108}
    assert service["spec"]["selector"] == statefulset["spec"]["selector"]["matchLabels"]


def _groupcoord_containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    pods = [*spec.get("initContainers", []), *spec.get("containers", [])]
    return [c for c in pods if c["name"] == "groupcoord"]


# What the downward API gives a container in these tests (status.podIP and the like). Not the
# `default` namespace: a manifest that assumed it would go unnoticed.
POD_FIELDS = {"status.podIP": "10.1.2.3", "metadata.name": "orders-worker-7d9f-abcde",
              "metadata.namespace": "payments"}  # fmt: skip
_K8S_VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def container_env(
    container: dict[str, Any], fields: dict[str, str] | None = None
) -> dict[str, str]:
    """A container's env as Kubernetes resolves it: values, and downward-API fields."""
    fields = POD_FIELDS if fields is None else fields
    env: dict[str, str] = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = str(e["value"])
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in fields, f"{e['name']}: an unexpected downward-API field {path}"
            env[e["name"]] = fields[path]
    return env


def expand(arg: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in args; a reference to an undefined variable fails here
    (Kubernetes would pass it on literally)."""

    def one(match: re.Match[str]) -> str:
        assert match.group(1) in env, f"{arg}: $({match.group(1)}) is not in the container's env"
        return env[match.group(1)]

    return _K8S_VAR.sub(one, arg)


def test_kubernetes_command_lines_and_config_are_valid_settings(tmp_path: Path) -> None:
    docs = manifests()
    configmap = next(d for d in docs if d["kind"] == "ConfigMap")
    toml_text = configmap["data"]["groupcoord.toml"]
    toml_path = tmp_path / "groupcoord.toml"
    toml_path.write_text(toml_text)
    workloads = [d for d in docs if d["kind"] in ("StatefulSet", "Deployment")]
    assert len(workloads) == 2
    for doc in workloads:
        (container,) = _groupcoord_containers(doc)
        env = container_env(container)
        argv = [expand(a.replace("/etc/groupcoord/groupcoord.toml", str(toml_path)), env)
                for a in container["args"]]  # fmt: skip
        settings = serve_settings(argv, env)
        ports = {p["containerPort"] for p in container["ports"]}
        assert addresses.parse_host_port(settings.metrics_listen)[1] in ports
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in container:
                assert container[probe]["httpGet"]["path"] in ("/healthz", "/readyz")
        if not (settings.upstream and settings.state == "upstream"):  # a fleet keeps nothing
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert settings.data_dir in mounts
    # The standalone coordinator listens for other pods; the sidecar only for its own pod.
    standalone = next(d for d in workloads if d["kind"] == "StatefulSet")
    sidecar = next(d for d in workloads if d["kind"] == "Deployment")
    assert tomllib.loads(toml_text)["listen"].startswith("0.0.0.0:")
    sidecar_args = _groupcoord_containers(sidecar)[0]["args"]
    assert "--listen=127.0.0.1:9092" in sidecar_args
    assert any(a.startswith("--upstream=") for a in sidecar_args)
    assert _groupcoord_containers(sidecar)[0]["restartPolicy"] == "Always"  # native sidecar
    assert (
        standalone["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] * 1000
        > (tomllib.loads(toml_text)["shutdown_timeout_ms"])
    )


def test_kubernetes_sidecars_form_a_fleet() -> None:
    """The Deployment's replicas share one coordinator: state upstream, each sidecar advertising
    its pod IP on the fleet port, that port declared, readiness on /readyz, no state volume."""
    sidecar = next(d for d in manifests() if d["kind"] == "Deployment")
    assert sidecar["spec"]["replicas"] > 1
    (container,) = _groupcoord_containers(sidecar)
    env = container_env(container)
    settings = serve_settings([expand(a, env) for a in container["args"]], env)
    assert settings.upstream and settings.state == "upstream"
    # Its own fleet: the defaults would join every application's sidecars on this cluster.
    name = sidecar["metadata"]["name"]
    assert name in settings.fleet_group and name.replace("-", "_") in settings.state_topic
    pod_ip = next(e for e in container["env"] if e["name"] == "POD_IP")
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert "--fleet-advertise=$(POD_IP):9094" in container["args"]
    listen_host, listen_port = addresses.parse_host_port(settings.fleet_listen)
    advertised = addresses.parse_host_port(settings.fleet_advertise)
    assert listen_host == "0.0.0.0"  # other pods reach it on the pod IP
    assert advertised == (POD_FIELDS["status.podIP"], listen_port)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["fleet"] == listen_port == 9094
    assert ports["metrics"] == addresses.parse_host_port(settings.metrics_listen)[1]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["startupProbe"]["httpGet"]["path"] == "/readyz"
    # No volume: group state and the rebalance history are on the upstream cluster.
    assert not sidecar["spec"]["template"]["spec"].get("volumes")
    assert "volumeClaimTemplates" not in sidecar["spec"]
    text = (DEPLOY / "kubernetes" / "sidecar.yaml").read_text()
    assert "NetworkPolicy" in text and "9094" in text  # the comment on pod-to-pod reachability


# -- sizes and namespaces -------------------------------------------------------------------------

_QUANTITY = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti)?$")
_UNITS = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
# The history at its largest (its retention plus the segment being written) takes at most half
# of its volume: the rest is the group log's (StatefulSet) or headroom (the sidecar's emptyDir).
HISTORY_SHARE = 0.5


def quantity_bytes(text: object) -> int:
    """A Kubernetes quantity (1Gi, 256Mi) in bytes."""
    match = _QUANTITY.match(str(text))
    assert match, f"an unexpected quantity {text!r}"
    return int(match.group(1)) * _UNITS[match.group(2)]


def resolved(doc: dict[str, Any], tmp_path: Path, fields: dict[str, str] | None = None
             ) -> config.Settings:  # fmt: skip
    """The settings a workload's groupcoord container runs with (its ConfigMap file included)."""
    configmap = next(d for d in manifests() if d["kind"] == "ConfigMap")
    toml_path = tmp_path / "groupcoord.toml"
    toml_path.write_text(configmap["data"]["groupcoord.toml"])
    (container,) = _groupcoord_containers(doc)
    env = container_env(container, fields)
    argv = [expand(a.replace("/etc/groupcoord/groupcoord.toml", str(toml_path)), env)
            for a in container["args"]]  # fmt: skip
    return serve_settings(argv, env)


def volume_bytes(doc: dict[str, Any], name: str) -> int:
    """The size of a workload's volume `name`: its claim's request, or its emptyDir's limit."""
    for claim in doc["spec"].get("volumeClaimTemplates", []):
        if claim["metadata"]["name"] == name:
            return quantity_bytes(claim["spec"]["resources"]["requests"]["storage"])
    volume = next(v for v in doc["spec"]["template"]["spec"]["volumes"] if v["name"] == name)
    assert "sizeLimit" in volume.get("emptyDir", {}), f"{name}: a volume of unbounded size"
    return quantity_bytes(volume["emptyDir"]["sizeLimit"])


def test_history_retention_fits_each_volume(tmp_path: Path) -> None:
    workloads = [d for d in manifests() if d["kind"] in ("StatefulSet", "Deployment")]
    assert len(workloads) == 2
    for doc in workloads:
        settings = resolved(doc, tmp_path)
        (container,) = _groupcoord_containers(doc)
        if settings.upstream and settings.state == "upstream":
            # A fleet member writes nothing to DATA_DIR: its history goes to the upstream's
            # history topic, so a volume would hold nothing (and suggest that it does).
            assert not container.get("volumeMounts"), doc["kind"]
            assert not doc["spec"]["template"]["spec"].get("volumes"), doc["kind"]
            continue
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == settings.data_dir]
        size = volume_bytes(doc, mount["name"])
        largest = settings.history_retention_bytes + settings.history_segment_bytes
        assert settings.history, doc["kind"]
        assert largest <= size * HISTORY_SHARE, (
            f"{doc['kind']}: history up to {largest >> 20} MiB in a {size >> 20} MiB volume"
        )
        assert settings.history_segment_bytes * 4 <= settings.history_retention_bytes
    # Compose volumes have no size: the history's is set there rather than left at 1 GiB.
    compose = [yaml.safe_load((DEPLOY / name).read_text())["services"]
               for name in ("docker-compose.yml", "docker-compose.fleet.yml")]  # fmt: skip
    services = [s for c in compose for name, s in c.items() if name.startswith("groupcoord")]
    assert len(services) == 4
    for service in services:
        env = dict(image_env(), **{k: str(v) for k, v in service["environment"].items()})
        settings = serve_settings(service.get("command", ["groupcoord", "serve"]), env)
        assert settings.source("history_retention_bytes") != "default", service
        largest = settings.history_retention_bytes + settings.history_segment_bytes
        assert largest <= 512 << 20


def test_no_namespace_is_hardcoded(tmp_path: Path) -> None:
    """Applied in any namespace, the StatefulSet tells clients its Service's name there."""
    text = "\n".join(p.read_text() for p in sorted((DEPLOY / "kubernetes").glob("*.yaml")))
    assert ".default.svc" not in text and "namespace: default" not in text
    docs = manifests()
    assert all("namespace" not in d["metadata"] for d in docs)
    statefulset = next(d for d in docs if d["kind"] == "StatefulSet")
    service = next(d for d in docs if d["kind"] == "Service")
    for namespace in ("payments", "kafka-tools"):
        fields = dict(POD_FIELDS, **{"metadata.namespace": namespace})
        settings = resolved(statefulset, tmp_path, fields)
        name = service["metadata"]["name"]
        assert settings.advertised_host == f"{name}.{namespace}.svc.cluster.local"


def test_compose_fleet_runs_three_sidecars_on_one_upstream() -> None:
    path = DEPLOY / "docker-compose.fleet.yml"
    services = yaml.safe_load(path.read_text())["services"]
    assert services["tansu"]["image"] == "ghcr.io/tansu-io/tansu:0.6.0"
    tansu_env = services["tansu"]["environment"]
    assert tansu_env["ADVERTISED_LISTENER_URL"] == "tcp://tansu:9092"  # reachable by service name
    sidecars = sorted(name for name in services if name.startswith("groupcoord-"))
    assert sidecars == ["groupcoord-1", "groupcoord-2", "groupcoord-3"]
    tansu_node_id = 111  # tansu 0.6.0's broker id: the sidecar's broker port is base + it
    host_ports: set[int] = set()
    for name in sidecars:
        service = services[name]
        assert service["image"] == "groupcoord:0.1.0"
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        env = dict(image_env(), **{k: str(v) for k, v in service["environment"].items()})
        settings = serve_settings(service["command"], env)
        assert settings.upstream == "tansu:9092" and settings.state == "upstream"
        assert addresses.parse_host_port(settings.fleet_advertise) == (
            name,
            addresses.parse_host_port(settings.fleet_listen)[1],
        )
        published = {int(p.split(":")[0]): int(p.split(":")[1]) for p in service["ports"]}
        listen = addresses.parse_host_port(settings.listen)[1]
        broker = settings.broker_port_base + tansu_node_id
        metrics = addresses.parse_host_port(settings.metrics_listen)[1]
        # The host reaches the sidecar at the port it advertises (same number both sides).
        assert published[listen] == listen and published[broker] == broker
        assert metrics in published.values()
        assert settings.advertised_host == "127.0.0.1"
        assert not host_ports & set(published), "two sidecars publish the same host port"
        host_ports |= set(published)


def test_compose_prometheus_and_grafana_fit_together() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"groupcoord", "prometheus", "grafana"}
    env = {k: str(v) for k, v in services["groupcoord"]["environment"].items()}
    serve_settings(["groupcoord", "serve"], env)
    assert services["groupcoord"]["build"]["dockerfile"] == "Dockerfile"
    assert (DEPLOY / services["groupcoord"]["build"]["context"] / "Dockerfile").is_file()
    for service in services.values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), volume

    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = prometheus["scrape_configs"]
    assert job["static_configs"][0]["targets"] == ["groupcoord:9108"]
    assert job["metrics_path"] == "/metrics"
    k8s = yaml.safe_load((DEPLOY / "prometheus" / "kubernetes-scrape.yml").read_text())
    assert k8s["scrape_configs"][0]["kubernetes_sd_configs"] == [{"role": "pod"}]

    datasources = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    (source,) = datasources["datasources"]
    assert source["url"] == "http://prometheus:9090" and source["uid"] == "prometheus"
    provider = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "dashboards" / "groupcoord.yml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    assert "./grafana/dashboards:/var/lib/grafana/dashboards:ro" in services["grafana"]["volumes"]


# -- the dashboard queries what /metrics exports --------------------------------------------------

_METRIC = re.compile(r"\b(groupcoord_[a-z0-9_]+)")
_BY = re.compile(r"\bby \(([^)]*)\)")
_MATCHER = re.compile(r"([a-z_]+)\s*(?:=~|!~|!=|=)\s*\"")


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20
    return exprs


def test_dashboard_covers_what_the_issue_asks() -> None:
    text = " ".join(dashboard_queries())
    for needed in ("groupcoord_rebalances_total", "groupcoord_rebalance_duration_seconds_bucket",
                   "sum by (state) (groupcoord_groups", "groupcoord_requests_total",
                   "groupcoord_request_duration_seconds_bucket", "groupcoord_log_size_bytes",
                   "groupcoord_log_fsync_seconds_bucket", "sum by (cause)",
                   # issue 24: lag, the upstream, history drops
                   "groupcoord_group_lag_sum", "groupcoord_upstream_up",
                   "groupcoord_upstream_broker_up",
                   "sum by (api) (rate(groupcoord_upstream_requests",
                   "groupcoord_upstream_request_bytes_total",
                   "groupcoord_upstream_response_bytes_total",
                   "groupcoord_upstream_request_duration_seconds_bucket",
                   "groupcoord_history_dropped_events_total"):  # fmt: skip
        assert needed in text, needed


async def _scenario(port: int) -> None:
    """A rebalance, a commit, a second member's join and leave: every labelled series appears."""
    conn, member_id, _ = await ops_util.stable_member("dash", "t", [0, 1], "127.0.0.1", port)
    try:
        assert await conn.commit("dash-simple", "t", {0: 1}) == {0: 0}
        other = await RawConn.open("127.0.0.1", port)
        try:
            # Joins while the group is Stable: a rebalance (cause member_joined) that completes
            # when the leader rejoins.
            other_id = await ops_util.member_id_for(other, "dash", ["t"])
            await ops_util.send_join(other, "dash", ["t"], other_id, rebalance_timeout_ms=60_000)
            await ops_util.wait_state(port, "dash", "PreparingRebalance")
            rejoined = await ops_util.join(conn, "dash", ["t"], member_id)
            joined = wire.decode_join_v5(await ops_util.answer(other))
            assert joined.error_code == 0 and rejoined.error_code == 0
            await asyncio.gather(
                ops_util.sync(other, "dash", joined.generation_id, joined.member_id, []),
                ops_util.sync(conn, "dash", rejoined.generation_id, member_id, []),
            )
            await ops_util.request(other, wire.leave_group_v3("dash", [joined.member_id]))
        finally:
            other.close()
    finally:
        conn.close()


# The sidecar panels' metrics: only a sidecar exports them (lag only with --metrics-per-group).
_SIDECAR_ONLY = re.compile(r"\bgroupcoord_(upstream_|group_lag_)")


def exported_labels(text: str) -> dict[str, set[str]]:
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def not_exported(exprs: list[str], labels: dict[str, set[str]]) -> list[str]:
    """What the queries `exprs` read (metrics, and labels they group or match by) that a scrape
    with these `labels` lacks."""
    missing: list[str] = []
    for expr in exprs:
        names = _METRIC.findall(expr)
        assert names, expr
        missing += [f"{n} (in {expr})" for n in names if n not in labels]
        used = {x.strip() for b in _BY.findall(expr) for x in b.split(",")}
        used |= set(_MATCHER.findall(expr))
        used -= {"le", "job", "instance", ""}  # le: every bucket; job/instance: Prometheus's own
        have = set().union(*(labels.get(n, set()) for n in names))
        missing += [f"label {label!r} of {names} (in {expr})" for label in used - have]
    return missing


async def test_every_dashboard_metric_is_exported(tmp_path: Path) -> None:
    proc = ops_util.start(tmp_path, tmp_path / "data", {"t": 2}, metrics=True)
    try:
        await _scenario(proc.port)
        labels = exported_labels(proc.metrics_text())
    finally:
        proc.kill()
    exprs = [e for e in dashboard_queries() if not _SIDECAR_ONLY.search(e)]
    missing = not_exported(exprs, labels)
    assert not missing, "the dashboard queries what /metrics does not export:\n" + "\n".join(
        missing
    )


@pytest.mark.clients
async def test_sidecar_panels_query_what_a_sidecar_exports(
    stack: Stack, upstream: Upstream
) -> None:
    """The lag and upstream panels, against a sidecar in front of a real tansu or Kafka after a
    topic is created, produced to and committed through it (lag is measured every 300 ms here)."""
    exprs = [e for e in dashboard_queries() if _SIDECAR_ONLY.search(e)]
    assert len(exprs) >= 6, exprs
    sidecar = stack.sidecar(upstream.bootstrap)
    topic = upstream.name("dash")
    await create_topic(sidecar.bootstrap, topic, 2)
    await produce(sidecar.bootstrap, topic, ["a", "b", "c", "d"])
    assert await commit(sidecar.port, "dash-group", topic, {0: 0, 1: 0}) == 0

    def scrape() -> list[str]:
        return not_exported(exprs, exported_labels(sidecar.metrics()))

    await rc.wait_until(lambda: not scrape(), 15, "every sidecar panel's series")


# -- the Dockerfile --------------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    text = (REPO / "Dockerfile").read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = "\n".join(lines).replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage() -> list[tuple[str, str]]:
    steps = dockerfile()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last_from:]


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in final_stage():
        if word == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def test_dockerfile_cmd_is_the_entry_point_the_tests_run() -> None:
    cmds = [json.loads(rest) for word, rest in final_stage() if word == "CMD"]
    assert len(cmds) == 1, "one exec-form CMD"
    (cmd,) = cmds
    assert cmd[:2] == ["groupcoord", "serve"]
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["groupcoord"] == "coordinator.cli:main"
    # ...the module the tests start servers with (tests/support/realclients.py).
    test_cmd = rc.groupcoord_command(9092, Path("d"), {}, {}, [])
    assert test_cmd[1:4] == ["-m", "coordinator.cli", "serve"]
    settings = serve_settings(cmd, image_env())
    assert addresses.parse_host_port(settings.listen)[0] == "0.0.0.0"
    assert addresses.parse_host_port(settings.metrics_listen)[0] == "0.0.0.0"

    steps = final_stage()
    exposed = {int(p) for word, rest in steps if word == "EXPOSE" for p in rest.split()}
    assert {addresses.parse_host_port(settings.listen)[1], 9108} <= exposed == {9092, 9108}
    volumes = [json.loads(rest) for word, rest in steps if word == "VOLUME"]
    assert [settings.data_dir] in volumes
    (user,) = [rest for word, rest in steps if word == "USER"]
    assert user.split(":")[0] not in ("root", "0")
    assert ("STOPSIGNAL", "SIGTERM") in steps
    assert settings.shutdown_timeout_ms < 10_000  # inside docker stop's default grace period


def test_dockerfile_copies_every_package() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    # Top-level directories: a subpackage comes with its parent's COPY.
    packages = {p.split(".")[0] for p in pyproject["tool"]["setuptools"]["packages"]}
    copied = {rest.split()[0] for word, rest in dockerfile() if word == "COPY"}
    assert set(packages) <= copied, f"packages not copied into the image: {set(packages) - copied}"


def _healthcheck_code() -> str:
    (check,) = [rest for word, rest in final_stage() if word == "HEALTHCHECK"]
    exec_form = json.loads(check[check.index("CMD") + 3 :].strip())
    assert exec_form[:2] == ["python", "-c"]
    return str(exec_form[2])


def test_dockerfile_healthcheck_passes_against_a_running_server(tmp_path: Path) -> None:
    code = _healthcheck_code()
    proc = ops_util.start(tmp_path, tmp_path / "data", {"t": 1}, metrics=True)
    try:
        env = dict(os.environ, GROUPCOORD_METRICS_LISTEN=f"0.0.0.0:{proc.metrics_port}")
        ok = subprocess.run(
            [sys.executable, "-c", code], check=False, env=env, capture_output=True, timeout=10
        )
        assert ok.returncode == 0, ok.stderr
    finally:
        proc.kill()
    down = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, timeout=10
    )
    assert down.returncode != 0
