"""Print the outcome of `make mutation`: the kill rate, then the mutants that were not killed.

Reads what mutmut 3 left in mutants/ (one `<module>.py.meta` JSON file per mutated module, holding
each mutant's test exit code) and names each exit code with mutmut's own table, so it agrees with
`mutmut results`. A mutant counts as killed when the tests failed on it, hung past mutmut's
timeout, crashed the interpreter, or did not type-check. Everything else is a survivor, and
every survivor needs a test that fails on it or a reason it is equivalent (docs/development.md,
"Mutation testing"). A reason is either a `# pragma: no mutate` comment on the line (mutmut then
makes no mutant there, so it never shows here), or, when other mutants on the same line are
killed and must stay, an entry in tests/mutation_survivors.toml:

    [mutants."coordinator.core.group.xǁClassicGroupǁselect_protocol__mutmut_11"]
    original = "votes: dict[str, int] = dict.fromkeys(candidates, 0)"
    mutated = "votes: dict[str, int] = dict.fromkeys(candidates, 1)"
    reason = "every candidate starts one vote higher: the order of the votes is the same"

`original` and `mutated` are the changed line before and after (as `mutmut show` prints them,
stripped); mutant numbers shift when a function changes, so an entry whose lines no longer
match the mutant of that name is reported as stale, not as explained. The report ends with the
survivors that are explained (with their reasons), then those that are not, then the entries
that no longer name a survivor (delete them).

    python -m tests.mutation_report [--mutants DIR] [--reasons FILE]

Exit status 0 whatever the rate: the figure is for people, not a gate.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
import tomllib
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from mutmut.stats import status_by_exit_code

KILLED = frozenset({"killed", "timeout", "segfault", "caught by type check"})
NOT_RUN = frozenset({"not checked", "check was interrupted by user", "skipped"})
REASONS = Path(__file__).with_name("mutation_survivors.toml")
_NAME = re.compile(r"^(?P<module>.+?)\.(?P<function>x[_ǁ].*)__mutmut_(?P<n>\d+)$")


_Def = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Reason:
    original: str
    mutated: str
    reason: str


def read_reasons(path: Path) -> dict[str, Reason]:
    """{mutant name: Reason} from the survivors file (none when it does not exist)."""
    if not path.exists():
        return {}
    table = tomllib.loads(path.read_text())["mutants"]
    return {name: Reason(e["original"], e["mutated"], e["reason"]) for name, e in table.items()}


class Changes:
    """The changed lines of each mutant, read from the mutated copies mutmut keeps in mutants/
    (each mutant is a function `<name>__mutmut_<n>` beside the original `<name>__mutmut_orig`)."""

    def __init__(self, mutants_dir: Path) -> None:
        self._dir = mutants_dir
        self._modules: dict[str, tuple[str, dict[str, _Def]]] = {}

    def _functions(self, module: str) -> tuple[str, dict[str, _Def]]:
        if module not in self._modules:
            path = self._dir / (module.replace(".", "/") + ".py")
            source = path.read_text() if path.exists() else ""
            tree = ast.parse(source)
            functions: dict[str, _Def] = {
                n.name: n
                for n in ast.walk(tree)
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
            self._modules[module] = (source, functions)
        return self._modules[module]

    def of(self, name: str) -> tuple[str, str] | None:
        """(original, mutated) lines of the mutant, stripped and joined; None if not found."""
        match = _NAME.match(name)
        if match is None:
            return None
        source, functions = self._functions(match["module"])
        base = match["function"] + "__mutmut_"
        orig, mutant = functions.get(base + "orig"), functions.get(base + match["n"])
        if orig is None or mutant is None:
            return None
        # The def lines differ by the function's name only, unless the change is on that line
        # (a default argument, or a one-line function).
        before = (ast.get_source_segment(source, orig) or "").splitlines()
        after = (ast.get_source_segment(source, mutant) or "").splitlines()
        if before and after:
            before[0] = before[0].replace(base + "orig", "f", 1)
            after[0] = after[0].replace(base + match["n"], "f", 1)
        diff = list(difflib.ndiff(before, after))
        removed = " / ".join(line[2:].strip() for line in diff if line.startswith("- "))
        added = " / ".join(line[2:].strip() for line in diff if line.startswith("+ "))
        return removed, added


def read_statuses(mutants_dir: Path) -> dict[str, dict[str, str]]:
    """{module path: {mutant name: status}} for every module mutmut mutated."""
    by_module: dict[str, dict[str, str]] = {}
    for meta in sorted(mutants_dir.rglob("*.py.meta")):
        module = meta.relative_to(mutants_dir).as_posix().removesuffix(".meta")
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        by_module[module] = {name: status_by_exit_code[code] for name, code in codes.items()}
    return by_module


def rate(statuses: dict[str, str]) -> tuple[int, int]:
    """(killed, total) over the mutants that were run."""
    run = [s for s in statuses.values() if s not in NOT_RUN]
    return sum(s in KILLED for s in run), len(run)


# The packages the kill rate is given for (the aim is 90% or more in each), most specific first:
# a module belongs to the first whose folder holds it.
PACKAGES = (
    ("core/consumer", "coordinator/core/consumer/"),
    ("core/share", "coordinator/core/share/"),
    ("core", "coordinator/core/"),
    ("security", "coordinator/security/"),
    ("sidecar", "coordinator/sidecar/"),
    ("storage", "storage/"),
)


def package_of(module: str) -> str:
    """The package of a module path (`coordinator/core/group.py` -> `core`); `other` if none."""
    return next((name for name, folder in PACKAGES if module.startswith(folder)), "other")


def by_package(by_module: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """{package: {mutant name: status}}, in PACKAGES' order, only the packages with mutants."""
    merged: dict[str, dict[str, str]] = {}
    for module, statuses in by_module.items():
        merged.setdefault(package_of(module), {}).update(statuses)
    order = [name for name, _ in PACKAGES] + ["other"]
    return {name: merged[name] for name in order if name in merged}


def percent(killed: int, total: int) -> str:
    return f"{100 * killed / total:.1f}%" if total else "n/a"


def report(
    by_module: dict[str, dict[str, str]],
    reasons: dict[str, Reason] | None = None,
    changes: Changes | None = None,
) -> str:
    reasons = reasons or {}
    everything = {name: s for statuses in by_module.values() for name, s in statuses.items()}
    killed, total = rate(everything)
    counts = Counter(everything.values())
    lines = [
        f"killed/total = {killed}/{total} = {percent(killed, total)}",
        "  " + ", ".join(f"{status}: {n}" for status, n in sorted(counts.items())),
        "",
        "per package:",
    ]
    for package, statuses in by_package(by_module).items():
        k, t = rate(statuses)
        lines.append(f"  {package:<13}  {k:>5}/{t:<5} {percent(k, t):>6}")
    lines += ["", "per module:"]
    width = max((len(m) for m in by_module), default=0)
    for module, statuses in by_module.items():
        k, t = rate(statuses)
        lines.append(f"  {module:<{width}}  {k:>4}/{t:<4} {percent(k, t):>6}")
    if counts.keys() & NOT_RUN:
        lines += ["", "some mutants were never run (an interrupted or narrowed run, MUTANTS=...): "
                  "run `make mutation` to finish"]
    explained: list[str] = []
    survivors: dict[str, list[str]] = defaultdict(list)
    alive: set[str] = set()
    for module, statuses in by_module.items():
        for name, status in statuses.items():
            if status in KILLED or status in NOT_RUN:
                continue
            alive.add(name)
            entry = reasons.get(name)
            found = changes.of(name) if changes is not None and entry is not None else None
            if entry is not None and found == (entry.original, entry.mutated):
                explained.append(f"  {name}  [{status}]\n      {entry.reason}")
            elif entry is not None:
                survivors[module].append(f"{name}  [{status}]  (stale reason: the change is now "
                                         f"{found!r}; read it again)")  # fmt: skip
            else:
                survivors[module].append(f"{name}  [{status}]")
    left = sum(len(v) for v in survivors.values())
    lines += ["", f"not killed, equivalent (tests/mutation_survivors.toml): {len(explained)}"]
    lines += sorted(explained)
    lines += ["", f"not killed, unexplained: {left} (read one: mutmut show NAME)"]
    for module, names in survivors.items():
        lines.append(f"  {module}")
        lines += [f"    {n}" for n in sorted(names)]
    # A reason is stale once its mutant is killed or no longer exists; one whose mutant was not
    # run this time (a narrowed run) is kept.
    not_run = {name for name, s in everything.items() if s in NOT_RUN}
    gone = sorted(set(reasons) - alive - not_run)
    if gone:
        lines += ["", f"reasons for mutants that no longer survive (delete them): {len(gone)}"]
        lines += [f"  {n}" for n in gone]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="mutmut's work dir")
    parser.add_argument("--reasons", type=Path, default=REASONS, help="the survivors file")
    args = parser.parse_args(argv)
    by_module = read_statuses(args.mutants)
    if not by_module:
        print(f"no mutmut results in {args.mutants}/: run `make mutation`", file=sys.stderr)
        return 1
    print(report(by_module, read_reasons(args.reasons), Changes(args.mutants)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
