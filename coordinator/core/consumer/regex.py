"""Topic subscriptions by regular expression (KIP-848 `SubscribedTopicRegex`).

Kafka compiles them with RE2/J (`com.google.re2j.Pattern`) and a topic matches when the whole
name matches (`matcher(name).matches()`). We use Python's `re` with `fullmatch`, after refusing
what RE2 does not support, so that a regex Kafka rejects with INVALID_REGULAR_EXPRESSION is
rejected here too:
- backreferences (`\\1`..`\\9`, `\\k<name>`, `(?P=name)`), lookahead and lookbehind (`(?=`,
  `(?!`, `(?<=`, `(?<!`), atomic groups `(?>`, conditionals `(?(`, comments `(?#`,
  possessive quantifiers (`*+`, `++`, `?+`, `}+`), `\\Z`, and the inline flags RE2 lacks
  (`a`, `L`, `u`, `x`).
Then Python must compile it. Where we differ from RE2 on purpose: a few RE2-only constructs that
Python's `re` cannot compile (`\\z`, `\\pN`, `\\Q..\\E`, `(?U)`, `[[:alpha:]]` classes) are
rejected as invalid here although Kafka accepts them; a client using them gets
INVALID_REGULAR_EXPRESSION instead of a subscription. Every regex both accept matches the same
topic names for ASCII topic names (the only legal ones).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

__all__ = ["InvalidRegex", "compile_regex", "resolve", "unsupported_construct"]


class InvalidRegex(ValueError):
    """The regex is not valid RE2 (INVALID_REGULAR_EXPRESSION)."""


_GROUP_PREFIXES = {
    "(?=": "lookahead",
    "(?!": "negative lookahead",
    "(?<=": "lookbehind",
    "(?<!": "negative lookbehind",
    "(?>": "atomic group",
    "(?(": "conditional",
    "(?#": "comment group",
    "(?P=": "named backreference",
}
_RE2_FLAGS = frozenset("imsU-")
_QUANTIFIERS = frozenset("*+?}")
_BACKREFERENCE_DIGITS = frozenset("123456789")


def unsupported_construct(regex: str) -> str | None:
    """The first construct RE2 does not support, described; None when there is none."""
    i, n = 0, len(regex)
    in_class = False
    while i < n:
        c = regex[i]
        if c == "\\":
            nxt = regex[i + 1 : i + 2]  # "" for a trailing backslash: Python's error names it
            if not in_class:
                if nxt in _BACKREFERENCE_DIGITS:
                    return f"backreference \\{nxt}"
                if nxt == "k":
                    return "named backreference \\k"
                if nxt == "Z":
                    return "\\Z (RE2 has only \\z)"
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            i += 1
            continue
        if c == "[":
            in_class = True
            # a ']' right after '[' or '[^' is a literal member of the class
            j = i + 1
            if j < n and regex[j] == "^":
                j += 1
            if j < n and regex[j] == "]":
                j += 1
            i = j
            continue
        if c == "(":
            for prefix, what in _GROUP_PREFIXES.items():
                if regex.startswith(prefix, i):
                    return what
            if regex.startswith("(?", i) and not regex.startswith("(?P<", i):
                j = i + 2
                while j < n and regex[j] not in ":)":
                    if regex[j] not in _RE2_FLAGS:
                        return f"inline flag {regex[j]!r}"
                    j += 1
        if c == "+" and i > 0 and regex[i - 1] in _QUANTIFIERS and not _escaped(regex, i - 1):
            return "possessive quantifier"
        i += 1
    return None


def _escaped(regex: str, i: int) -> bool:
    backslashes = 0
    while i - 1 - backslashes >= 0 and regex[i - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


@lru_cache(maxsize=1024)
def compile_regex(regex: str) -> re.Pattern[str]:
    """The compiled regex, or InvalidRegex (Kafka's throwIfRegularExpressionIsInvalid)."""
    what = unsupported_construct(regex)
    if what is not None:
        raise InvalidRegex(f"SubscribedTopicRegex `{regex}` is not a valid RE2 regex: {what}")
    try:
        return re.compile(regex)
    except (re.error, OverflowError, RecursionError) as e:
        raise InvalidRegex(
            f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}"
        ) from e


def resolve(regex: str, topic_names: Iterable[str]) -> frozenset[str]:
    """The topics whose whole name matches (an invalid regex matches nothing, as Kafka logs
    and ignores one that fails to compile at refresh time)."""
    try:
        pattern = compile_regex(regex)
    except InvalidRegex:
        return frozenset()
    return frozenset(t for t in topic_names if pattern.fullmatch(t))
