"""The command line of `groupcoord groups`: its subcommands and options (ours), and Kafka's
invocation style taken as well (`kafka_style`), so that a kafka-consumer-groups.sh command line
works with `groupcoord groups` in front of it:

    groupcoord groups --list [--state [S]] [--type [T]]
    groupcoord groups --describe --group G [--members|--offsets|--state] [--verbose]
    groupcoord groups --reset-offsets --group G --topic T --to-earliest [--dry-run|--execute]
    groupcoord groups --delete --group G       groupcoord groups --delete-offsets --group G ...

`kafka_style` moves the action flag (--list, --describe, --delete, --reset-offsets,
--delete-offsets) to the subcommand's place; `--group G` is accepted by every subcommand beside
the positional GROUP...
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.tools.groups_reset import (
    parse_datetime_ms,
    parse_duration_ms,
    parse_topic_arg,
)

DEFAULT_URL = "http://127.0.0.1:9108"
ACTIONS = {"--list": "list", "--describe": "describe", "--delete": "delete",
           "--reset-offsets": "reset-offsets", "--delete-offsets": "delete-offsets"}  # fmt: skip
SUBCOMMANDS = {*ACTIONS.values(), "fleet"}


def kafka_style(argv: Sequence[str]) -> list[str]:
    """`groups --describe --group G ...` -> `groups describe --group G ...`; anything else as
    given (argparse reports what is wrong with it)."""
    args = list(argv)
    if "groups" not in args:
        return args
    at = args.index("groups") + 1
    rest = args[at:]
    if not rest or rest[0] in SUBCOMMANDS or rest[0] in ("-h", "--help"):
        return args
    actions = [a for a in rest if a in ACTIONS]
    if len(actions) != 1:
        return args
    rest.remove(actions[0])
    return [*args[:at], ACTIONS[actions[0]], *rest]


def _arg(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse `type` whose ValueError message is shown as is (exit code 2)."""

    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def _groups_arg(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("group", metavar="GROUP", nargs="*", help=help_text)
    _group_option(parser)
    parser.add_argument("--all-groups", action="store_true", help="every group of the cluster")


def _group_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--group",
        dest="group_option",
        action="append",
        default=[],
        metavar="GROUP",
        help="a group, as Kafka's tool names it (repeatable)",
    )


def add_parser(sub: Any) -> None:
    groups = sub.add_parser(
        "groups",
        help="list, describe, delete or reset consumer groups (over Kafka), or show a sidecar "
        "fleet",
    )
    groups_sub = groups.add_subparsers(dest="groups_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        default="127.0.0.1:9092",
        metavar="HOST:PORT",
        help="a groupcoord or Kafka broker (default: %(default)s)",
    )
    common.add_argument(
        "--timeout-ms", type=int, default=10_000, help="give up after (default: %(default)s)"
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    common.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties for a secured cluster, as Kafka's tools take them "
        "(security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location PEM)",
    )
    listing = groups_sub.add_parser(
        "list", parents=[common],
        help="every group's name (as Kafka's tool; --state, --type, --table add columns)",
    )  # fmt: skip
    listing.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="STATES",
        help="a STATE column; with STATES (Stable,Empty,...) only those",
    )
    listing.add_argument(
        "--type",
        nargs="?",
        const="",
        metavar="TYPES",
        help="a TYPE column; with TYPES (classic,consumer) only those",
    )
    listing.add_argument("--table", action="store_true",
                         help="every column: GROUP TYPE STATE PROTOCOL-TYPE")  # fmt: skip

    describe = groups_sub.add_parser(
        "describe", parents=[common],
        help="groups' committed offsets, log end offsets and lag (default), members, state",
    )  # fmt: skip
    _groups_arg(describe, "the groups to describe")
    describe.add_argument("--offsets", action="store_true",
                          help="per partition: CURRENT-OFFSET, LOG-END-OFFSET, LAG, owner "
                          "(the default view)")  # fmt: skip
    describe.add_argument("--members", action="store_true", help="the members")
    describe.add_argument("--state", action="store_true", help="state, coordinator, strategy")
    describe.add_argument("--verbose", action="store_true",
                          help="with --members: each member's epoch and current and target "
                          "assignments; with --state: the group and assignment epochs")  # fmt: skip

    delete = groups_sub.add_parser(
        "delete", parents=[common], help="delete groups and their offsets (groups without members)"
    )
    _groups_arg(delete, "the groups to delete")

    delete_offsets_ = groups_sub.add_parser(
        "delete-offsets", parents=[common], help="delete a group's committed offsets of topics"
    )
    delete_offsets_.add_argument("group", metavar="GROUP", nargs="?")
    _group_option(delete_offsets_)
    delete_offsets_.add_argument(
        "--topic", action="append", required=True, type=_arg(parse_topic_arg),
        metavar="TOPIC[:P,P]", help="a topic, or some of its partitions (repeatable)",
    )  # fmt: skip

    reset = groups_sub.add_parser(
        "reset-offsets", parents=[common],
        help="plan (--dry-run, default) or commit (--execute) new offsets for inactive groups",
    )  # fmt: skip
    _groups_arg(reset, "the groups to reset")
    where = reset.add_mutually_exclusive_group()
    where.add_argument("--topic", action="append", type=_arg(parse_topic_arg),
                       metavar="TOPIC[:P,P]", help="a topic, or some of its partitions "
                       "(repeatable)")  # fmt: skip
    where.add_argument("--all-topics", action="store_true",
                       help="every partition the group has a committed offset for")  # fmt: skip
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument(
        "--to-current",
        action="store_true",
        help="the committed offset (the log end offset where there is none)",
    )
    to.add_argument("--from-file", metavar="CSV",
                    help="the offsets of a CSV file, Kafka's: topic,partition,offset (or "
                    "group,topic,partition,offset); no --topic/--all-topics")  # fmt: skip
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    to.add_argument("--shift-by", type=int, metavar="N",
                    help="the committed offset + N (N may be negative; clamped)")  # fmt: skip
    to.add_argument("--to-datetime", type=_arg(parse_datetime_ms), metavar="ISO",
                    help="the first offset at or after YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm] "
                    "(local time without a zone)")  # fmt: skip
    to.add_argument(
        "--by-duration",
        type=_arg(parse_duration_ms),
        metavar="DURATION",
        help="the first offset at or after now - DURATION (PnDTnHnMnS, or 1h30m)",
    )
    reset.add_argument("--export", action="store_true",
                       help="print the plan as Kafka's CSV (topic,partition,offset), for "
                       "--from-file")  # fmt: skip
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (default)")
    mode.add_argument("--execute", action="store_true",
                      help="commit the plan (the group must be Empty or not exist)")  # fmt: skip

    fleet = groups_sub.add_parser(
        "fleet",
        help="a sidecar fleet: which member owns which state partition, and load times "
        "(reads /fleet from the HTTP endpoint)",
    )
    fleet.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help=f"a member's HTTP endpoint (--metrics-listen); repeat for several members, whose "
        f"documents are merged (default: {DEFAULT_URL})",
    )
    fleet.add_argument(
        "--timeout-ms", type=int, default=10_000, help="give up after (default: %(default)s)"
    )
    fleet.add_argument("--json", action="store_true", help="print JSON instead of tables")
