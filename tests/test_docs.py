"""Every "§N" / "§N.M" cited in the source names a section heading of docs/protocol.md.

Comments and docstrings cite the Kafka behaviour they follow as `docs/protocol.md §N.M` (or a bare
`§N.M` in a module that says so); this keeps those citations from pointing at nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "protocol.md"
CITING_PACKAGES = ("coordinator", "protocol", "storage", "pipeline", "bench", "tests")

_CITATION = re.compile(r"§(\d+(?:\.\d+)*)")
# "## 5. JoinGroup", "### 5.5 Completing the join phase": the number, with an optional final dot.
_HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


def headings() -> set[str]:
    return set(_HEADING.findall(DOC.read_text(encoding="utf-8")))


def citations() -> dict[str, list[str]]:
    """Section number -> the places ("path:line") that cite it."""
    cited: dict[str, list[str]] = {}
    for package in CITING_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            lines = path.read_text(encoding="utf-8").splitlines()
            for lineno, line in enumerate(lines, start=1):
                for number in _CITATION.findall(line):
                    where = f"{path.relative_to(REPO)}:{lineno}"
                    cited.setdefault(number, []).append(where)
    return cited


def test_the_document_has_numbered_sections() -> None:
    found = headings()
    assert {"1", "5", "5.5", "10.4", "13.3"} <= found


def test_every_cited_section_exists() -> None:
    found = headings()
    missing = {n: places for n, places in citations().items() if n not in found}
    assert not missing, "sections cited but not in docs/protocol.md: " + "; ".join(
        f"§{n} ({', '.join(places)})" for n, places in sorted(missing.items())
    )


def test_the_check_would_catch_a_missing_section() -> None:
    # Spelled with \N{...} so that this file does not cite a section itself.
    text = "see docs/protocol.md \N{SECTION SIGN}99.9 and \N{SECTION SIGN}3"
    assert _CITATION.findall(text) == ["99.9", "3"]
    assert "99.9" not in headings()
