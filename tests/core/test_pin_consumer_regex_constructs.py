"""KIP-848 topic regexes (coordinator.core.consumer.regex), pinned where `make mutation` found
them loose: the constructs RE2 (so Kafka) refuses are named in the error: numbered and named
backreferences and `\\Z` outside a character class (not inside one, nor after an escaped
backslash; a trailing backslash is Python's "bad escape", not a backreference), lookarounds,
atomic, conditional and comment groups and inline flags other than imsU- anywhere in the regex;
a class ends at its first unescaped ']' that is not its first member."""

from __future__ import annotations

import pytest

from coordinator.core.consumer.regex import InvalidRegex, compile_regex, unsupported_construct


@pytest.mark.parametrize(("regex", "found"), [
    (r"(a)\1", "backreference \\1"),
    (r"(a)\9", "backreference \\9"),
    (r"(?P<n>a)\k<n>", "named backreference \\k"),
    (r"orders\Z", "\\Z (RE2 has only \\z)"),
    (r"orders\z", None),
    (r"\K", None),  # not RE2's \k (Python refuses it later)
    (r"\0", None),  # an octal escape, not a backreference
    (r"[\1]", None),  # in a class: an octal escape
    (r"[\Z]", None),
    (r"\\1", None),  # an escaped backslash, then the digit 1
    (r"\\Z", None),
    ("a\\", None),  # a trailing backslash: nothing after it
])
def test_backreferences_and_big_z_are_refused_outside_a_class(
    regex: str, found: str | None
) -> None:
    assert unsupported_construct(regex) == found
    if found is not None:
        with pytest.raises(InvalidRegex) as refused:
            compile_regex(regex)
        said = str(refused.value)
        assert said == f"SubscribedTopicRegex `{regex}` is not a valid RE2 regex: {found}"


def test_a_trailing_backslash_is_a_bad_escape_not_a_backreference() -> None:
    with pytest.raises(InvalidRegex) as refused:
        compile_regex("orders\\")
    assert str(refused.value).startswith(
        "SubscribedTopicRegex `orders\\` is not a valid regular expression: "
        "bad escape (end of pattern)"
    )


@pytest.mark.parametrize(("regex", "found"), [
    ("a(?=b)", "lookahead"),
    ("a(?!b)", "negative lookahead"),
    ("a(?<=b)", "lookbehind"),
    ("a(?<!b)", "negative lookbehind"),
    ("a(?>b)", "atomic group"),
    ("a(?(1)b)", "conditional"),
    ("a(?#note)", "comment group"),
    ("(?P<n>a)(?P=n)", "named backreference"),
    ("a(?P<n>b)", None),
    ("(?i)orders", None),
    ("a(?i:b)", None),
    ("a(?-i:b)", None),
    ("a(?imsU)", None),
    ("a(?x)", "inline flag 'x'"),
    ("a(?ix:b)", "inline flag 'x'"),
    ("a(?X)", "inline flag 'X'"),
    ("a(?i", None),  # unterminated: Python's error names it
    ("*+", "possessive quantifier"),  # the second character
    ("+a*", None),  # a leading '+' does not look back to the end
])
def test_groups_and_flags_re2_lacks_are_named(regex: str, found: str | None) -> None:
    assert unsupported_construct(regex) == found


@pytest.mark.parametrize(("regex", "found"), [
    ("[a](?=b)", "lookahead"),  # the class ends at its ']'
    ("[(?=b)]", None),  # inside a class '(' is a member
    (r"[]\1]", None),  # a ']' first in a class is a member, not its end
    (r"x[^]\1]", None),
    (r"x[^]]\1", "backreference \\1"),
    (r"x[]]\1", "backreference \\1"),
    (r"x[^a]\1", "backreference \\1"),
    (r"x[\]\1]", None),  # an escaped ']' does not end the class
    (r"\.(?=b)", "lookahead"),  # after an escape the scan goes on
    ("a[", None),  # unterminated: Python's error names it
    ("a[^", None),
])
def test_character_classes_end_at_their_first_unescaped_closing_bracket(
    regex: str, found: str | None
) -> None:
    assert unsupported_construct(regex) == found
