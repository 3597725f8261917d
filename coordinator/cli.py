"""`groupcoord`: the command line.

    groupcoord serve [--listen HOST:PORT] [--data-dir DIR] [--topic NAME:PARTITIONS ...] ...

Start-up problems (a bad flag value) stop with one line naming the setting and exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import uuid
from collections.abc import Sequence

from coordinator.core import CoordinatorConfig
from coordinator.journal import DiskJournal
from coordinator.server import DEFAULT_MAX_FRAME_BYTES, Server, ServerOptions
from coordinator.topics import TopicCatalog, TopicInfo, parse_topic_spec
from storage.disk import DiskLog, parse_policy
from storage.dump import dump

log = logging.getLogger("groupcoord")

# Declared topics get an id derived from their name, so it is the same after a restart.
_TOPIC_ID_NAMESPACE = uuid.UUID("6f1c1d3e-2a8b-4a53-9a0e-5b7d4c2e9f10")


def parse_host_port(value: str, setting: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"{setting}: expected HOST:PORT, got {value!r}")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{setting}: port must be an integer, got {port!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"{setting}: port must be 0-65535, got {number}")
    return host.strip("[]"), number


def new_member_id(prefix: str) -> str:
    """Kafka's member id: `<client id or group instance id>-<uuid4>` (reference §3.3)."""
    return f"{prefix}-{uuid.uuid4()}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="groupcoord", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the coordinator",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = CoordinatorConfig()
    serve.add_argument("--listen", default="127.0.0.1:9092", help="HOST:PORT to accept clients on")
    serve.add_argument(
        "--advertised-host", default=None, help="host put in Metadata (default: the listen host)"
    )
    serve.add_argument("--data-dir", default="./data", help="where the group log lives")
    serve.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME:PARTITIONS",
        help="declare a topic (repeatable)",
    )
    serve.add_argument(
        "--initial-rebalance-delay-ms",
        type=int,
        default=defaults.initial_rebalance_delay_ms,
        help="group.initial.rebalance.delay.ms",
    )
    serve.add_argument(
        "--session-timeout-min-ms",
        type=int,
        default=defaults.session_timeout_min_ms,
        help="group.min.session.timeout.ms",
    )
    serve.add_argument(
        "--session-timeout-max-ms",
        type=int,
        default=defaults.session_timeout_max_ms,
        help="group.max.session.timeout.ms",
    )
    serve.add_argument(
        "--max-group-size", type=int, default=defaults.max_group_size, help="group.max.size"
    )
    serve.add_argument(
        "--max-frame-bytes",
        type=int,
        default=DEFAULT_MAX_FRAME_BYTES,
        help="largest request (socket.request.max.bytes); a larger one closes the connection",
    )
    serve.add_argument(
        "--metrics-listen", default="127.0.0.1:9108", help="HOST:PORT for /metrics ('' = off)"
    )
    serve.add_argument(
        "--fsync",
        default="always",
        help="'always' (a reply waits for the fsync of its records; concurrent writes share one) "
        "or 'interval:<ms>' (a reply waits for the OS write; fsync within <ms>)",
    )
    serve.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")

    log_cmd = sub.add_parser("log", help="inspect the group log")
    log_sub = log_cmd.add_subparsers(dest="log_command", required=True)
    dump_cmd = log_sub.add_parser("dump", help="print every record, like kafka-dump-log")
    dump_cmd.add_argument("data_dir", metavar="DATA_DIR")
    return parser


def options_from_args(args: argparse.Namespace) -> tuple[ServerOptions, TopicCatalog]:
    host, port = parse_host_port(args.listen, "--listen")
    for name, value, low in (
        ("--initial-rebalance-delay-ms", args.initial_rebalance_delay_ms, 0),
        ("--session-timeout-min-ms", args.session_timeout_min_ms, 1),
        ("--session-timeout-max-ms", args.session_timeout_max_ms, 1),
        ("--max-group-size", args.max_group_size, 1),
        ("--max-frame-bytes", args.max_frame_bytes, 64),
    ):
        if value < low:
            raise ValueError(f"{name}: must be >= {low}, got {value}")
    if args.session_timeout_max_ms < args.session_timeout_min_ms:
        raise ValueError("--session-timeout-max-ms: must be >= --session-timeout-min-ms")
    topics = []
    for spec in args.topic:
        name, partitions = parse_topic_spec(spec)
        topics.append(TopicInfo(name, uuid.uuid5(_TOPIC_ID_NAMESPACE, name), partitions))
    config = CoordinatorConfig(
        session_timeout_min_ms=args.session_timeout_min_ms,
        session_timeout_max_ms=args.session_timeout_max_ms,
        initial_rebalance_delay_ms=args.initial_rebalance_delay_ms,
        max_group_size=args.max_group_size,
    )
    options = ServerOptions(
        host=host,
        port=port,
        advertised_host=args.advertised_host,
        max_frame_bytes=args.max_frame_bytes,
        coordinator=config,
    )
    return options, TopicCatalog(tuple(topics))


async def serve(
    options: ServerOptions,
    catalog: TopicCatalog,
    metrics_listen: str,
    data_dir: str,
    fsync: str,
) -> None:
    disk = await DiskLog.open(data_dir, policy=fsync)
    server = Server(options, catalog, new_member_id, journal=DiskJournal(disk))
    await server.start()
    if metrics_listen:
        from prometheus_client import start_http_server

        mhost, mport = parse_host_port(metrics_listen, "--metrics-listen")
        start_http_server(mport, addr=mhost)  # its own thread: never blocks the event loop
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await server.stop()
    await disk.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(getattr(args, "log_level", "INFO")).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command == "serve":
        try:
            options, catalog = options_from_args(args)
            try:
                parse_policy(args.fsync)
            except ValueError as exc:
                raise ValueError(f"--fsync: {exc}") from None
        except ValueError as exc:
            print(f"groupcoord: {exc}", file=sys.stderr)
            return 2
        import uvloop

        with contextlib.suppress(KeyboardInterrupt):
            uvloop.run(serve(options, catalog, args.metrics_listen, args.data_dir, args.fsync))
        return 0
    if args.command == "log":
        for line in dump(args.data_dir):
            print(line)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
