"""Print the outcome of `make mutation`: the kill rate, then the mutants that were not killed.

Reads what mutmut 3 left in mutants/ (one `<module>.py.meta` JSON file per mutated module, holding
each mutant's test exit code) and names each exit code with mutmut's own table, so it agrees with
`mutmut results`. A mutant counts as killed when the tests failed on it, hung past mutmut's
timeout, crashed the interpreter, or did not type-check. Everything else is listed by module: read
one with `mutmut show <name>`, then add a test that fails on it or note in the code why it is
equivalent (README "Development").

    python -m tests.mutation_report [--mutants DIR]

Exit status 0 whatever the rate: the figure is for people, not a gate.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

from mutmut.stats import status_by_exit_code

KILLED = frozenset({"killed", "timeout", "segfault", "caught by type check"})
NOT_RUN = frozenset({"not checked", "check was interrupted by user", "skipped"})


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


def percent(killed: int, total: int) -> str:
    return f"{100 * killed / total:.1f}%" if total else "n/a"


def report(by_module: dict[str, dict[str, str]]) -> str:
    everything = {name: s for statuses in by_module.values() for name, s in statuses.items()}
    killed, total = rate(everything)
    counts = Counter(everything.values())
    lines = [
        f"killed/total = {killed}/{total} = {percent(killed, total)}",
        "  " + ", ".join(f"{status}: {n}" for status, n in sorted(counts.items())),
        "",
        "per module:",
    ]
    width = max((len(m) for m in by_module), default=0)
    for module, statuses in by_module.items():
        k, t = rate(statuses)
        lines.append(f"  {module:<{width}}  {k:>4}/{t:<4} {percent(k, t):>6}")
    if counts.keys() & NOT_RUN:
        lines += ["", "not run yet (an interrupted run): run `make mutation` again to finish"]
    survivors: dict[str, list[str]] = defaultdict(list)
    for module, statuses in by_module.items():
        for name, status in statuses.items():
            if status not in KILLED and status not in NOT_RUN:
                survivors[module].append(f"{name}  [{status}]")
    left = sum(len(v) for v in survivors.values())
    lines += ["", f"not killed: {left} (read one: mutmut show NAME)"]
    for module, names in survivors.items():
        lines.append(f"  {module}")
        lines += [f"    {n}" for n in sorted(names)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"), help="mutmut's work dir")
    args = parser.parse_args(argv)
    by_module = read_statuses(args.mutants)
    if not by_module:
        print(f"no mutmut results in {args.mutants}/: run `make mutation`", file=sys.stderr)
        return 1
    print(report(by_module))
    return 0


if __name__ == "__main__":
    sys.exit(main())
