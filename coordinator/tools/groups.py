"""`groupcoord groups`: consumer groups over the Kafka protocol, what kafka-consumer-groups.sh and
`rpk group` do, for users without the Java tools. Every subcommand but `fleet` works against
groupcoord (standalone or sidecar) and against any Kafka broker:

- `list`: ListGroups to every broker in Metadata (a group lives on its coordinator only).
- `describe GROUP... | --all-groups` with the views `--offsets` (the default: CURRENT-OFFSET,
  LOG-END-OFFSET, LAG per partition, with the owning member), `--members [--verbose]` and
  `--state`; several views may be asked at once.
- `delete GROUP... | --all-groups`: DeleteGroups (the coordinator refuses a group with members).
- `delete-offsets GROUP --topic T[:P,...]`: OffsetDelete (KIP-496).
- `reset-offsets GROUP... | --all-groups`, a scope and a scenario (coordinator.tools.groups_reset):
  prints the plan (--dry-run, the default); --execute commits it, refused unless the group is
  Empty or does not exist, as Kafka does.
- `fleet`: a groupcoord sidecar fleet's /fleet document over HTTP (the operator endpoint,
  --metrics-listen): which member owns which state partition, and each partition's load time.

Which client makes which call: aiokafka (a runtime dependency) where it supports the call as we
need it: Metadata for topics, ListOffsets (earliest, latest, by time) and the reset's
OffsetCommit (coordinator.tools.groups_log). Our own codec on `protocol/` and kio for the rest:
FindCoordinator, ListGroups, DescribeGroups, OffsetFetch, DeleteGroups, OffsetDelete, where
aiokafka lacks the call or loses what we show (coordinator.tools.groups_wire says which and why).

The coordinator's address is FindCoordinator's answer, shown as Kafka shows it, `host:port (id)`;
in sidecar mode that is one of the sidecar's per-broker listeners, whose port is ephemeral unless
`--broker-port-base` is set. Exit codes: 0 ok, 1 a group does not exist, a request was refused,
or the cluster answered an error or could not be reached (for `fleet`: an endpoint could not be
reached, answered an error, or is not in a fleet), 2 a bad argument.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from kio.schema.errors import ErrorCode

from coordinator.serve.addresses import parse_host_port
from coordinator.serve.status import FLEET_STATUSES
from coordinator.tools import command_config
from coordinator.tools import groups_render as render
from coordinator.tools.groups_args import DEFAULT_URL, add_parser, kafka_style
from coordinator.tools.groups_log import TP, ClusterLog, commit
from coordinator.tools.groups_render import table

# The client calls other modules (and tests) use through this one.
__all__ = ["GroupView", "GroupsError", "add_parser", "describe_group", "kafka_style",
           "list_groups", "main"]  # fmt: skip
from coordinator.tools.groups_reset import (
    PlanRow,
    Scenario,
    offsets_csv,
    parse_offsets_csv,
    plan,
    scope,
)
from coordinator.tools.groups_share import describe_group
from coordinator.tools.groups_wire import (
    SECURITY,
    GroupsError,
    GroupView,
    delete_groups,
    delete_offsets,
    list_groups,
)

# Kafka's words for the errors these commands meet (org.apache.kafka.common.protocol.Errors).
ERROR_MESSAGES = {
    ErrorCode.non_empty_group: "The group is not empty.",
    ErrorCode.group_id_not_found: "The group id does not exist.",
    ErrorCode.group_subscribed_to_topic: "The consumer group is actively subscribed to the topic.",
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.invalid_group_id: "The configured groupId is invalid.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
}
INACTIVE = ("Empty", "Dead")  # the states in which Kafka lets offsets be reset
# classic and KIP-848 states in which the group's assignment is moving
REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
# Kafka's own words (ConsumerGroupCommandOptions) for a reset without --dry-run or --execute.
DRY_RUN_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. In version 5.0, "
    "this command will require either --dry-run or --execute to be specified. You should add "
    "the --dry-run option explicitly if you are scripting this command and want to keep the "
    "current default behavior without prompting."
)


def error_text(code: ErrorCode) -> str:
    message = ERROR_MESSAGES.get(code)
    return f"{code.name.upper()}: {message}" if message else code.name.upper()


class Out:
    """stdout for the result, stderr for notes and errors, each line prefixed `groupcoord:`."""

    status = 0

    def note(self, text: str) -> None:
        print(f"groupcoord: {text}", file=sys.stderr)

    def error(self, text: str) -> None:
        self.status = 1
        self.note(text)


# -- describe -------------------------------------------------------------------------------------


async def _names(args: argparse.Namespace, host: str, port: int, timeout_s: float) -> list[str]:
    if args.all_groups:
        return [g["group_id"] for g in await list_groups(host, port, timeout_s)]
    return list(dict.fromkeys(args.group))


async def _log_end(
    args: argparse.Namespace, views: list[GroupView], timeout_s: float, out: Out
) -> dict[TP, int]:
    """The log end offset of every partition the groups own or committed, from the cluster that
    holds the data; without it (unreachable, a partition without a leader) LOG-END-OFFSET and LAG
    are `-`, with a note."""
    tps = sorted({tp for v in views for tp in _partitions(v)})
    if not tps:
        return {}
    try:
        async with ClusterLog(args.bootstrap_server, timeout_s) as log:
            return await log.latest(log.known(tps))
    except GroupsError as exc:
        out.note(f"warning: no log end offsets: {exc}")
        return {}


def _partitions(view: GroupView) -> set[TP]:
    committed = {(t, p) for t, ps in (view.offsets or {}).items() for p in ps}
    return committed | set(view.assigned())


async def _describe(
    args: argparse.Namespace, host: str, port: int, timeout_s: float, out: Out
) -> None:
    views_asked = [v for v in ("state", "members", "offsets") if getattr(args, v)] or ["offsets"]
    with_offsets = "offsets" in views_asked
    views: list[GroupView] = []
    for name in await _names(args, host, port, timeout_s):
        view = await describe_group(host, port, name, timeout_s, offsets=with_offsets)
        if view.state == "Dead":  # what DescribeGroups says of a group that does not exist
            out.error(f"consumer group {name!r} does not exist")
            continue
        views.append(view)
        if not args.json and view.state == "Empty":
            out.note(f"consumer group {name!r} has no active members")
        elif not args.json and view.state in REBALANCING:
            out.note(f"warning: consumer group {name!r} is rebalancing")
    log_end = await _log_end(args, views, timeout_s, out) if with_offsets else {}
    rows = {v.group_id: render.offset_rows(v, log_end) for v in views} if with_offsets else {}
    for r in (r for group_rows in rows.values() for r in group_rows):
        if r.lag is not None and r.lag < 0:
            out.note(
                f"warning: group {r.group_id!r}: the committed offset {r.current_offset} of "
                f"{r.topic}-{r.partition} is past its log end offset {r.log_end_offset} "
                "(negative LAG): the log was truncated or recreated, or the broker's "
                "ListOffsets answer is wrong; consumers resuming there may skip or stall"
            )
    if args.json:
        print(json.dumps([render.view_json(v, rows.get(v.group_id)) for v in views], indent=2))
        return
    sections: dict[str, Callable[[GroupView], str]] = {
        "state": lambda v: render.render_state(v, args.verbose),
        "members": lambda v: render.render_members(v, args.verbose),
        "offsets": lambda v: render.render_offsets(rows[v.group_id]),
    }
    blocks = [sections[name](v) for v in views for name in views_asked]
    if blocks:
        print("\n\n".join(blocks))


# -- delete, delete-offsets -----------------------------------------------------------------------


async def _delete(
    args: argparse.Namespace, host: str, port: int, timeout_s: float, out: Out
) -> None:
    names = await _names(args, host, port, timeout_s)
    if not names:  # --all-groups of a cluster without groups
        print("[]" if args.json else "No consumer groups to delete.")
        return
    results = await delete_groups(host, port, names, timeout_s)
    if args.json:
        print(json.dumps([{"group_id": g, "error": None if e == ErrorCode.none else e.name.upper()}
                          for g, e in results.items()], indent=2))  # fmt: skip
    failed = {g: e for g, e in results.items() if e != ErrorCode.none}
    deleted = ", ".join(f"'{g}'" for g, e in results.items() if e == ErrorCode.none)
    if failed:
        out.error("deletion of some consumer groups failed:\n" + "\n".join(
            f"* Group '{g}' could not be deleted due to: {error_text(e)}"
            for g, e in failed.items()))  # fmt: skip
    if args.json:
        return
    if not failed:
        print(f"Deletion of requested consumer groups ({deleted}) was successful.")
    elif deleted:
        print(f"These consumer groups were deleted successfully: {deleted}")


async def _delete_offsets(
    args: argparse.Namespace, host: str, port: int, timeout_s: float, out: Out
) -> None:
    group = args.group[0]
    view = await describe_group(host, port, group, timeout_s)
    committed = view.offsets or {}
    wanted: dict[str, list[int]] = {}
    unknown: list[str] = []
    async with ClusterLog(args.bootstrap_server, timeout_s) as log:
        for topic, asked in args.topic:
            # no partitions named: every partition in Metadata or with a committed offset
            found = (
                set(asked)
                if asked is not None
                else ((log.partitions(topic) or set()) | set(committed.get(topic, {})))
            )
            if not found:
                unknown.append(topic)
                continue
            wanted[topic] = sorted(set(wanted.get(topic, [])) | found)
    top, results = (
        await delete_offsets(host, port, group, wanted, timeout_s)
        if wanted else (ErrorCode.none, {})
    )  # fmt: skip
    rows = [(t, str(p), e) for (t, p), e in sorted(results.items())]
    rows += [(t, render.MISSING, ErrorCode.unknown_topic_or_partition) for t in unknown]
    failed = top != ErrorCode.none or any(e != ErrorCode.none for _, _, e in rows)
    if top != ErrorCode.none:
        out.error(error_text(top))
    elif failed:
        out.error("encountered some partition-level error, see the follow-up details")
    if args.json:
        print(json.dumps({
            "group_id": group, "error": None if top == ErrorCode.none else top.name.upper(),
            "partitions": [{"topic": t, "partition": None if p == render.MISSING else int(p),
                            "error": None if e == ErrorCode.none else e.name.upper()}
                           for t, p, e in rows],
        }, indent=2))  # fmt: skip
        return
    if not failed:
        print(f"Request succeeded for deleting offsets from group {group}.")
    print(table(["TOPIC", "PARTITION", "STATUS"],
                [[t, p, "Successful" if e == ErrorCode.none else f"Error: {error_text(e)}"]
                 for t, p, e in rows]))  # fmt: skip


# -- reset-offsets --------------------------------------------------------------------------------


def _scenario(args: argparse.Namespace, now_ms: int) -> Scenario:
    if args.to_current:
        return Scenario("current")
    if args.to_earliest:
        return Scenario("earliest")
    if args.to_latest:
        return Scenario("latest")
    if args.to_offset is not None:
        return Scenario("offset", args.to_offset)
    if args.shift_by is not None:
        return Scenario("shift", args.shift_by)
    if args.to_datetime is not None:
        return Scenario("time", args.to_datetime)
    return Scenario("time", now_ms - args.by_duration)


async def _reset(
    args: argparse.Namespace, host: str, port: int, timeout_s: float, out: Out
) -> None:
    from_file = _from_file(args.from_file) if args.from_file else None
    scenario = None if from_file is not None else _scenario(args, int(time.time() * 1000))
    topics = None if args.all_topics else list(args.topic or [])
    plans: list[PlanRow] = []
    names = await _names(args, host, port, timeout_s)
    if not args.dry_run and not args.execute and not args.json:
        print(DRY_RUN_WARNING, file=sys.stderr)
    async with ClusterLog(args.bootstrap_server, timeout_s) as log:
        for name in names:
            view = await describe_group(host, port, name, timeout_s)
            if view.state not in INACTIVE:
                refusal = (f"Assignments can only be reset if the group '{name}' is inactive, "
                           f"but the current state is {view.state}.")  # fmt: skip
                if args.execute:
                    out.error(refusal)
                    continue
                out.note(f"warning: --execute would be refused: {refusal}")
            warnings: list[str] = []
            committed = view.offsets or {}
            if from_file is not None:
                wanted = from_file.get(name, from_file.get(None, {}))
                rows = [PlanRow(name, t, p, committed.get(t, {}).get(p), o)
                        for (t, p), o in sorted(wanted.items())]  # fmt: skip
            else:
                assert scenario is not None
                rows = await plan(log, name, scope(log, topics, committed), committed,
                                  scenario, warnings)  # fmt: skip
            for warning in warnings:
                out.note(f"warning: {warning}")
            if args.execute and rows:
                offsets = {(r.topic, r.partition): r.new_offset for r in rows}
                await commit(args.bootstrap_server, name, offsets, timeout_s)
            plans.extend(rows)
    if args.json:
        print(json.dumps({"executed": bool(args.execute), "offsets": render.plan_json(plans)},
                         indent=2))  # fmt: skip
    elif args.export:
        print(offsets_csv(plans), end="")
    elif plans or not out.status:
        print(render.render_plan(plans))


def _from_file(path: str) -> dict[str | None, dict[TP, int]]:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_offsets_csv(f.read())
    except OSError as exc:
        raise GroupsError(f"--from-file: {exc}") from None
    except ValueError as exc:
        raise GroupsError(f"--from-file {path}: {exc}") from None


# -- the fleet (HTTP: /fleet) ---------------------------------------------------------------------


def fetch_fleet(url: str, timeout_s: float) -> dict[str, Any]:
    """One member's /fleet document; `url` is its operator endpoint (with or without /fleet)."""
    base = url.rstrip("/")
    target = base if base.endswith("/fleet") else base + "/fleet"
    try:
        with urllib.request.urlopen(target, timeout=timeout_s) as response:
            document: Any = json.load(response)
    except urllib.error.HTTPError as exc:
        detail = exc.read(200).decode("utf-8", "replace").strip()
        if exc.code == 404:
            raise GroupsError(f"{target}: {detail or 'not in a sidecar fleet'}") from None
        raise GroupsError(f"{target}: HTTP {exc.code} {detail}".rstrip()) from None
    except (OSError, TimeoutError) as exc:  # URLError is an OSError
        reason = getattr(exc, "reason", None) or exc or "timed out"
        raise GroupsError(f"cannot reach {target}: {reason}") from None
    except ValueError as exc:
        raise GroupsError(f"{target}: not a fleet document ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("partitions"), list):
        raise GroupsError(f"{target}: not a fleet document")
    return document


def merge_fleet(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """One view from several members' documents: the newest generation's fleet facts, and for
    each partition the row of the member that owns it (it alone knows the load time and the
    groups), else the row of the first document."""
    assert documents
    first = max(documents, key=lambda d: d.get("generation", -1))
    by_address = {d.get("address"): d for d in documents}
    rows: dict[int, dict[str, Any]] = {}
    for document in reversed(documents):  # the first document's rows win where no owner answered
        for row in document["partitions"]:
            rows[row["partition"]] = row
    for p, row in list(rows.items()):
        owner_doc = by_address.get(row.get("owner"))
        if owner_doc is not None:
            own = next((r for r in owner_doc["partitions"] if r["partition"] == p), None)
            if own is not None:
                rows[p] = own
    return {
        "state_topic": first.get("state_topic"),
        "fleet_group": first.get("fleet_group"),
        "generation": first.get("generation"),
        "members": first.get("members", []),
        "asked": [d.get("address") for d in documents],
        "ready": {d.get("address"): d.get("ready") for d in documents},
        "errors": {d.get("address"): d["error"] for d in documents if d.get("error")},
        "partitions": [rows[p] for p in sorted(rows)],
    }


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    out: list[tuple[int, int]] = []
    for n in sorted(numbers):
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in out) or "-"


def render_fleet(view: dict[str, Any]) -> str:
    parts = view["partitions"]
    counts = dict.fromkeys(FLEET_STATUSES, 0)
    for row in parts:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    head = table(
        ["FLEET-GROUP", "STATE-TOPIC", "GENERATION", "#MEMBERS", "#PARTITIONS", "STATUS"],
        [[str(view["fleet_group"]), str(view["state_topic"]), str(view["generation"]),
          str(len(view["members"])), str(len(parts)),
          " ".join(f"{s}={n}" for s, n in counts.items() if n) or "-"]],
    )  # fmt: skip
    owned: dict[str, list[int]] = {m: [] for m in view["members"]}
    for row in parts:
        if row.get("owner"):
            owned.setdefault(row["owner"], []).append(row["partition"])
    members = table(  # READY is known for the members asked (--url) only
        ["MEMBER", "READY", "#PARTITIONS", "PARTITIONS"],
        [[m, {True: "yes", False: "no"}.get(view["ready"].get(m), "-"), str(len(ps)),
          _ranges(ps)] for m, ps in sorted(owned.items())],
    )  # fmt: skip
    rows = table(
        ["PARTITION", "STATUS", "OWNER", "EPOCH", "GROUPS", "LOAD-SECONDS", "LOADED-AT"],
        [[str(r["partition"]), r["status"], r.get("owner") or "-",
          "-" if r.get("epoch") is None else str(r["epoch"]),
          *_load_columns(r)] for r in parts],
    )  # fmt: skip
    errors = "\n".join(f"error at {a}: {e}" for a, e in sorted(view["errors"].items()))
    return f"{head}\n\n{members}\n\n{rows}" + (f"\n\n{errors}" if errors else "")


def _load_columns(row: dict[str, Any]) -> list[str]:
    """GROUPS, LOAD-SECONDS, LOADED-AT: known only from the member serving the partition."""
    if row["status"] != "serving":
        return ["-", "-", "-"]
    seconds = row.get("load_seconds")
    at = row.get("loaded_at")
    return [
        str(row.get("groups", "-")),
        "-" if seconds is None else f"{seconds:.3f}",
        "-" if at is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)),
    ]


def _fleet_main(args: argparse.Namespace) -> int:
    urls = args.url or [DEFAULT_URL]
    for url in urls:
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            print(f"groupcoord: --url: expected http://HOST:PORT, got {url!r}", file=sys.stderr)
            return 2
    try:
        documents = [fetch_fleet(url, args.timeout_ms / 1000) for url in urls]
    except GroupsError as exc:
        print(f"groupcoord: {exc}", file=sys.stderr)
        return 1
    view = merge_fleet(documents)
    print(json.dumps(view, indent=2) if args.json else render_fleet(view))
    return 0


# -- the command ----------------------------------------------------------------------------------


COMMANDS = {
    "describe": _describe,
    "delete": _delete,
    "delete-offsets": _delete_offsets,
    "reset-offsets": _reset,
}


def main(args: argparse.Namespace) -> int:
    if args.groups_command == "fleet":
        return _fleet_main(args)
    try:
        host, port = parse_host_port(args.bootstrap_server)
    except ValueError as exc:
        print(f"groupcoord: --bootstrap-server: {exc}", file=sys.stderr)
        return 2
    if args.groups_command in ("describe", "delete", "reset-offsets", "delete-offsets"):
        positional = [args.group] if isinstance(args.group, str) else args.group or []
        args.group = [*positional, *args.group_option]
        if args.groups_command == "delete-offsets" and len(args.group) != 1:
            print("groupcoord: name one group (GROUP or --group GROUP)", file=sys.stderr)
            return 2
    if args.groups_command in ("describe", "delete", "reset-offsets") and (
        bool(args.group) == bool(args.all_groups)
    ):
        print("groupcoord: name the groups (GROUP... or --group GROUP) or give --all-groups",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.groups_command == "reset-offsets" and bool(args.from_file) == bool(
        args.topic or args.all_topics
    ):
        print("groupcoord: give --topic or --all-topics (but not with --from-file)",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.command_config:
        warnings: list[str] = []
        try:
            SECURITY.set(command_config.load(args.command_config, warnings))
        except command_config.CommandConfigError as exc:
            print(f"groupcoord: {exc}", file=sys.stderr)
            return 2
        for warning in warnings:
            print(f"groupcoord: {warning}", file=sys.stderr)
    # aiokafka logs its retries at WARNING; the commands report what matters in their own words.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    timeout_s = args.timeout_ms / 1000
    out = Out()
    try:
        if args.groups_command == "list":
            _print_list(asyncio.run(list_groups(host, port, timeout_s)), args)
        else:
            asyncio.run(COMMANDS[args.groups_command](args, host, port, timeout_s, out))
    except GroupsError as exc:
        print(f"groupcoord: {exc}", file=sys.stderr)
        return 1
    return out.status


def _print_list(rows: list[dict[str, str]], args: argparse.Namespace) -> None:
    """Bare names, one a line, as kafka-consumer-groups.sh --list; --state / --type add Kafka's
    columns (and with a value, filter: `--state Stable,Empty`); --table every column."""
    for option, key in (("state", "state"), ("type", "type")):
        wanted = {w.strip().lower() for w in (getattr(args, option) or "").split(",") if w.strip()}
        if wanted:
            rows = [r for r in rows if r[key].lower() in wanted]
    if args.json:
        print(json.dumps(rows, indent=2))
    elif args.table:
        header = ["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"]
        keys = ("group_id", "type", "state", "protocol_type")
        print(table(header, [[r[k] for k in keys] for r in rows]))
    elif args.state is not None or args.type is not None:
        columns = [("TYPE", "type")] if args.type is not None else []
        columns += [("STATE", "state")] if args.state is not None else []
        print(
            table(
                ["GROUP", *(h for h, _ in columns)],
                [[r["group_id"], *(_kafka_word(r[k]) for _, k in columns)] for r in rows],
            )
        )
    else:
        for r in rows:
            print(r["group_id"])


def _kafka_word(value: str) -> str:
    """Kafka's tool prints a group type capitalised (GroupType.toString: Classic, Consumer)."""
    return value.capitalize() if value in ("classic", "consumer") else value
