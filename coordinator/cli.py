"""`groupcoord`: the command line.

    groupcoord --version
    groupcoord serve [--config FILE] [--listen HOST:PORT] [--topic NAME:PARTITIONS ...] ...
    groupcoord groups list|describe GROUP [--bootstrap-server HOST:PORT]
    groupcoord log dump DATA_DIR

The composition root: the one module that imports the shell, the sidecar and the tools alike.
`serve`'s settings come from coordinator/serve/config.py's table (flags > GROUPCOORD_* env > TOML
file > defaults). A bad value, or a listener or data dir that cannot be opened, stops start-up with
one line naming the setting as the user wrote it, and exit code 2. Shutdown:
coordinator/serve/lifecycle.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import difflib
import gc
import logging
import os
import signal
import ssl
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from coordinator.core.topics import TopicCatalog, TopicInfo, parse_topic_spec
from coordinator.security.sasl import CredentialsError, parse_users_file
from coordinator.serve import addresses, config, history, http, lifecycle
from coordinator.serve.config import ConfigError, Settings
from coordinator.serve.journal import DiskJournal
from coordinator.serve.lifecycle import installed_version
from coordinator.serve.listener import share_ports
from coordinator.serve.runtime import Journal
from coordinator.serve.secure import SecurityOptions, make_ssl_context
from coordinator.serve.server import Server, ServerOptions
from coordinator.sidecar import fleet, history_topic, workers
from coordinator.sidecar import proxy as sidecar
from coordinator.sidecar.fleet_journal import FleetJournal
from coordinator.sidecar.fleet_tls import FleetTls
from coordinator.tools import groups as groups_cli
from coordinator.tools.dump import dump
from pipeline import cli as audit_cli
from storage.disk import DiskLog

log = logging.getLogger("groupcoord")

# Declared topics get an id derived from their name, so it is the same after a restart.
_TOPIC_ID_NAMESPACE = uuid.UUID("6f1c1d3e-2a8b-4a53-9a0e-5b7d4c2e9f10")

EXIT_CONFIG = 2  # a bad setting: argparse's exit code for bad usage


def parse_host_port(value: str, setting: str) -> tuple[str, int]:
    try:
        return addresses.parse_host_port(value)
    except ValueError as exc:
        raise ValueError(f"{setting}: {exc}") from None


def new_member_id(prefix: str) -> str:
    """Kafka's member id: `<client id or group instance id>-<uuid4>` (docs/protocol.md §3.3)."""
    return f"{prefix}-{uuid.uuid4()}"


class _Parser(argparse.ArgumentParser):
    """argparse, plus "did you mean" for a mistyped flag (Python 3.11's argparse has none; the
    TOML file's unknown keys already get one). Sub-commands' parsers are of this class too."""

    argv: Sequence[str] = ()  # set by main(): the words, to find the sub-command they named

    def error(self, message: str) -> NoReturn:
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            known = _option_strings(self, list(self.argv))
            hints = []
            for word in message[len(prefix) :].split():
                flag = word.split("=", 1)[0]
                if flag.startswith("--"):
                    close = difflib.get_close_matches(flag, known, n=1, cutoff=0.7)
                    if close:
                        hints.append(f"{flag}: did you mean {close[0]}?")
            if hints:
                message += " (" + "; ".join(hints) + ")"
        super().error(message)


def _option_strings(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """The long flags of `parser` and of the sub-commands `words` name (`groups describe`)."""
    found: list[str] = []
    for action in parser._actions:  # argparse has no public way to list them
        found += [o for o in action.option_strings if o.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            named = next((w for w in words if w in action.choices), None)
            if named is not None:
                rest = words[words.index(named) + 1 :]
                found += _option_strings(action.choices[named], rest)
    return sorted(set(found))


def build_parser() -> _Parser:
    parser = _Parser(prog="groupcoord", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"groupcoord {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve_cmd = sub.add_parser(
        "serve",
        help="run the coordinator",
        description="Run the coordinator. Each setting is a flag, an environment variable, or a "
        "key of the --config TOML file; a flag wins over the environment, which wins over the "
        "file. SIGTERM/SIGINT stop it gracefully; a second signal stops it at once.",
    )
    config.add_arguments(serve_cmd)
    serve_cmd.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved settings as TOML, each with its source, and exit",
    )

    log_cmd = sub.add_parser("log", help="inspect the group log")
    log_sub = log_cmd.add_subparsers(dest="log_command", required=True)
    dump_cmd = log_sub.add_parser("dump", help="print every record, like kafka-dump-log")
    dump_cmd.add_argument("data_dir", metavar="DATA_DIR")

    groups_cli.add_parser(sub)
    audit_cli.add_parser(sub)
    return parser


def options_from_settings(settings: Settings) -> tuple[ServerOptions, TopicCatalog]:
    host, port = addresses.parse_host_port(settings.listen)
    topics = []
    for spec in settings.topic:
        name, partitions = parse_topic_spec(spec)
        topics.append(TopicInfo(name, uuid.uuid5(_TOPIC_ID_NAMESPACE, name), partitions))
    coordinator = config.coordinator_config(settings)
    options = ServerOptions(
        host=host,
        port=port,
        advertised_host=settings.advertised_host,
        max_frame_bytes=settings.max_frame_bytes,
        coordinator=coordinator,
        security=security_options(settings),
    )
    return options, TopicCatalog(tuple(topics))


class StartupError(Exception):
    """A resource named by a setting could not be opened (one line, exit code 2)."""


def security_options(settings: Settings) -> SecurityOptions:
    """The listener's security (coordinator.serve.secure) from the settings; a file that cannot
    be read or used refuses to start, naming its setting."""
    protocol = settings.security_protocol
    context = None
    if protocol in ("SSL", "SASL_SSL"):
        context = _ssl_context(settings)
    users: list[tuple[str, str]] = []
    if settings.sasl_users_file:
        origin = settings.origin("sasl_users_file")
        try:
            with open(settings.sasl_users_file, encoding="utf-8") as f:
                users = parse_users_file(f.read(), settings.sasl_users_file)
        except (OSError, UnicodeDecodeError, CredentialsError) as exc:
            raise StartupError(f"{origin}: cannot use the users file: {exc}") from None
    super_users = tuple(p.strip() for p in settings.super_users.split(";") if p.strip())
    for principal in super_users:
        if ":" not in principal:
            origin = settings.origin("super_users")
            raise StartupError(f"{origin}: {principal!r} is not a principal TYPE:NAME")
    return SecurityOptions(
        protocol=protocol,
        mechanisms=tuple(m.strip() for m in settings.sasl_mechanisms.split(",") if m.strip()),
        authorizer=settings.authorizer == "acl",
        super_users=super_users,
        allow_everyone_if_no_acl_found=settings.allow_everyone_if_no_acl_found,
        session_lifetime_ms=settings.sasl_session_lifetime_ms,
        ssl_context=context,
        users=tuple(users),
    )


def _ssl_context(settings: Settings) -> ssl.SSLContext:
    try:
        return make_ssl_context(
            settings.ssl_certfile, settings.ssl_keyfile, settings.ssl_cafile or None
        )
    except (OSError, ssl.SSLError) as exc:
        names = "ssl_certfile/ssl_keyfile" + ("/ssl_cafile" if settings.ssl_cafile else "")
        raise StartupError(f"{names}: cannot load the TLS files: {exc}") from None


def _metrics_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    """--metrics-tls: the listener's certificate, in a context of its own (the Kafka listener
    may require client certificates; Prometheus and browsers have none)."""
    if not settings.metrics_tls:
        return None
    try:
        return make_ssl_context(settings.ssl_certfile, settings.ssl_keyfile, None)
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(f"ssl_certfile/ssl_keyfile: cannot load the TLS files: {exc}") from None


def _fleet_tls(settings: Settings) -> FleetTls | None:
    """A fleet member's mutual TLS with the others (coordinator.sidecar.fleet_tls), when the
    client listener is TLS; config's cross checks made sure a CA is given."""
    if not settings.upstream or settings.state != "upstream":
        return None
    if settings.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    cafile = settings.fleet_ssl_cafile or settings.ssl_cafile
    try:
        return FleetTls(settings.ssl_certfile, settings.ssl_keyfile, cafile)
    except (OSError, ssl.SSLError, ValueError) as exc:
        ca = "fleet_ssl_cafile" if settings.fleet_ssl_cafile else "ssl_cafile"
        raise StartupError(
            f"ssl_certfile/ssl_keyfile/{ca}: cannot use them for the fleet's mutual TLS: {exc}"
        ) from None


def _reload_on_sighup(
    settings: Settings,
    contexts: tuple[ssl.SSLContext | None, ...],
    fleet_tls: FleetTls | None = None,
) -> None:
    live = [c for c in contexts if c is not None]
    if live or fleet_tls is not None:
        asyncio.get_running_loop().add_signal_handler(
            signal.SIGHUP, reload_certificates, settings, live, fleet_tls
        )


def reload_certificates(
    settings: Settings, contexts: list[ssl.SSLContext], fleet_tls: FleetTls | None = None
) -> None:
    """SIGHUP: load the certificate, key and CAs again into the TLS contexts (the Kafka
    listener's, the HTTP endpoint's, the fleet listener's and its peer links'); new handshakes
    use them, connections already open keep theirs."""
    try:
        for context in contexts:
            context.load_cert_chain(settings.ssl_certfile, settings.ssl_keyfile)
            if settings.ssl_cafile and context.verify_mode == ssl.CERT_REQUIRED:
                context.load_verify_locations(settings.ssl_cafile)
        if fleet_tls is not None:
            fleet_tls.reload()
    except (OSError, ssl.SSLError, ValueError) as exc:
        log.error("SIGHUP: cannot reload the TLS files (keeping the old ones): %s", exc)
        return
    log.info("SIGHUP: TLS certificate reloaded from %s", settings.ssl_certfile)


GC_YOUNG_THRESHOLD = 20_000
"""Allocations between two young-generation collections (CPython's default is 700). A request
allocates a few dozen short-lived objects, and a commit's live ones wait a whole fsync for their
answer: with the default, a collection ran every few dozen requests, walked the in-flight
requests again each time and promoted them to older generations, which were then collected in
turn (4-5% of the server's CPU under 1-partition commits, measured with perf). The state itself
is frozen after loading (coordinator.serve.journal); this only spaces out the young collections."""


async def serve(settings: Settings) -> None:
    _, *older = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *older)
    options, catalog = options_from_settings(settings)
    signals = lifecycle.Signals(settings.shutdown_timeout_ms)
    metrics_context = _metrics_ssl_context(settings)
    fleet_tls = _fleet_tls(settings)
    _reload_on_sighup(settings, (options.security.ssl_context, metrics_context), fleet_tls)
    journal, disk = await _journal(settings)
    server = Server(options, catalog, new_member_id, journal=journal)
    side = sidecar.from_settings(server, settings)  # --upstream: sidecar mode
    team = None if side is None else fleet.from_settings(server, side, settings, fleet_tls)
    recorder = _history_recorder(settings, team)  # None with --no-history
    if recorder is not None:
        recorder.attach(server.event_sinks)
    obs: http.Observability | None = None
    try:
        # Before the server starts: /healthz answers while the log replays.
        obs = await _start_http(server, settings, recorder, metrics_context)
        await _start(server, settings, signals)
        if side is not None and not signals.stopping.is_set():
            await side.start(obs)
            if team is not None:
                try:
                    await team.start()
                except OSError as exc:
                    where = "{}:{}".format(*team.options.listen)
                    raise _cannot_listen(settings, "fleet_listen", exc, where) from None
        await signals.stopping.wait()
        if team is not None:
            await team.stop()  # leave the fleet first: the others take our partitions at once
        await server.stop(drain_timeout_s=settings.shutdown_timeout_ms / 2000)
        if team is not None:
            await team.close()
        if side is not None:
            await side.stop()
        if disk is not None:
            await disk.close()  # flush and fsync what is still pending
        log.info("stopped")
    finally:
        if obs is not None:
            await obs.close()
        if disk is not None:
            await disk.close()  # idempotent; on a failed start, the only close
        if recorder is not None:
            await asyncio.to_thread(recorder.close)  # writes what is queued, fsyncs
        signals.close()


def _history_recorder(
    settings: Settings, team: fleet.Fleet | None
) -> history.HistoryRecorder | None:
    """DATA_DIR/history, or in a fleet (whose pods keep nothing) the upstream's history topic."""
    if team is not None:
        return history_topic.from_settings(settings, team)
    return history.HistoryRecorder.from_settings(settings)


async def _start_http(
    server: Server,
    settings: Settings,
    recorder: history.HistoryRecorder | None,
    context: ssl.SSLContext | None,
) -> http.Observability:
    try:
        obs = await http.start(
            server,
            settings.metrics_listen,
            per_group=settings.metrics_per_group,
            history_dir=None if recorder is None else recorder.readback_dir,
            ssl_context=context,
        )
    except OSError as exc:
        raise _cannot_listen(settings, "metrics_listen", exc) from None
    if obs.metrics is not None:
        obs.metrics.history = recorder  # its drop and write counters (None: history off)
    return obs


async def _journal(settings: Settings) -> tuple[Journal, DiskLog | None]:
    """Where the records go: the local log, or a sidecar fleet's state topic upstream."""
    if settings.upstream and settings.state == "upstream":
        return FleetJournal(settings.state_topic_partitions), None  # coordinator.sidecar.fleet
    try:
        disk = await DiskLog.open(settings.data_dir, policy=settings.fsync)
    except OSError as exc:
        problem = lifecycle.data_dir_problem(settings.origin("data_dir"), settings.data_dir, exc)
        raise StartupError(problem) from None
    return DiskJournal(disk), disk


async def _start(server: Server, settings: Settings, signals: lifecycle.Signals) -> None:
    """Start, unless a signal comes first (a long log replay must not delay a stop)."""
    starting = asyncio.ensure_future(server.start())
    stopping = asyncio.ensure_future(signals.stopping.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        return
    try:
        starting.result()
    except OSError as exc:
        if server.listening:  # listening worked: loading the log failed (a read-only data dir)
            problem = lifecycle.data_dir_problem(
                settings.origin("data_dir"), settings.data_dir, exc
            )
            raise StartupError(problem) from None
        raise _cannot_listen(settings, "listen", exc) from None


def _cannot_listen(
    settings: Settings, name: str, exc: OSError, where: str | None = None
) -> StartupError:
    """'--listen: cannot listen on 127.0.0.1:9092: [Errno 98] Address already in use': uvloop's
    message names no address, and the setting may have come from a file or the environment."""
    address = where if where is not None else settings[name]
    return StartupError(f"{settings.origin(name)}: cannot listen on {address}: {exc}")


def main(argv: Sequence[str] | None = None) -> int:
    # `groupcoord groups --describe --group G`: kafka-consumer-groups.sh's style, too
    words = groups_cli.kafka_style(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    parser.argv = tuple(words)
    args = parser.parse_args(words)
    if args.command == "serve":
        return _main_serve(args, words)
    if args.command == "log":
        if not Path(args.data_dir).is_dir():
            # An error, not an empty dump: a script must not take a typo for an empty log.
            print(f"groupcoord log dump: no such directory: {args.data_dir}", file=sys.stderr)
            return 1
        try:
            for line in dump(args.data_dir):
                print(line)
            sys.stdout.flush()
        except BrokenPipeError:  # `log dump | head`: the reader has what it wanted
            # Python's recipe: stdout to devnull, so the flush at exit raises nothing either.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if args.command == "groups":
        return groups_cli.main(args)
    if args.command == "audit":
        return audit_cli.run(args)
    return EXIT_CONFIG


def _main_serve(args: argparse.Namespace, words: Sequence[str]) -> int:
    try:
        settings = config.resolve(args)
    except ConfigError as exc:
        print(f"groupcoord: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.print_config:
        print(config.render_toml(settings))
        return 0
    lifecycle.setup_logging(settings.log_level, settings.log_format)
    if settings.workers > 1:  # the parent of N fleet members (coordinator.sidecar.workers)
        return workers.supervise(words, settings)
    index = workers.worker_index()
    if index is not None:
        share_ports()  # one of them: the client and broker ports are the workers' together
        workers.tag_logs(index)
    import uvloop

    try:
        uvloop.run(serve(settings))
    except StartupError as exc:
        print(f"groupcoord: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    return 0


if __name__ == "__main__":
    sys.exit(main())
