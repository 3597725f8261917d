"""KIP-848 topic regexes (coordinator.core.consumer.regex), pinned where `make mutation` found
them loose: whether a `+` after a quantifier is a possessive quantifier (which RE2, so Kafka,
refuses) depends on whether that quantifier is itself escaped, i.e. on the parity of the
backslashes before it, counted back to the start of the regex."""

from __future__ import annotations

import pytest

from coordinator.core.consumer.regex import InvalidRegex, compile_regex, unsupported_construct

POSSESSIVE = "possessive quantifier"


@pytest.mark.parametrize(("regex", "found"), [
    ("a++", POSSESSIVE),
    ("a*+", POSSESSIVE),
    ("a?+", POSSESSIVE),
    ("a{2}+", POSSESSIVE),
    ("+a", None),  # a leading '+' has nothing before it (Python refuses it later)
    (r"a\++", None),  # an escaped '+' is a literal, quantified once
    (r"a\\++", POSSESSIVE),  # an escaped backslash, quantified, then '+'
    (r"a\\\++", None),  # an escaped backslash, then an escaped '+', quantified
    (r"\\++", POSSESSIVE),  # the same at the very start: both backslashes count
    (r"\++", None),
    (r"\\\\++", POSSESSIVE),
    ("[a++]", None),  # inside a class '+' is a member
    ("orders-.+", None),
])
def test_a_plus_after_a_quantifier_is_possessive_unless_the_quantifier_is_escaped(
    regex: str, found: str | None
) -> None:
    assert unsupported_construct(regex) == found
    if found is not None:
        with pytest.raises(InvalidRegex, match="not a valid RE2 regex: possessive quantifier"):
            compile_regex(regex)
