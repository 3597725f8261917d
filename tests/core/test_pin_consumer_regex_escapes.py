"""KIP-848 topic regexes (coordinator.core.consumer.regex), pinned where `make mutation` found
them loose: the escapes RE2 (so Kafka) refuses outside a character class (numbered and named
backreferences, `\\Z`) are named in the error, the same escapes inside a class or after an
escaped backslash are not, and a trailing backslash is Python's "bad escape", not a
backreference."""

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
