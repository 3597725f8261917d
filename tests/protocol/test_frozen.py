"""protocol.frozen.fast_init: the same values as the dataclass's own __init__, still frozen."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.messages import CommitPartition, Heartbeat, OffsetCommit
from protocol.frozen import fast_init, fast_replace


@dataclass(frozen=True, slots=True)
class Stock:
    a: int
    b: str | None
    c: tuple[int, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class Fast:
    a: int
    b: str | None
    c: tuple[int, ...]


@given(st.integers(), st.none() | st.text(), st.tuples(st.integers()))
def test_same_fields_equality_hash_and_repr_as_the_dataclass(
    a: int, b: str | None, c: tuple[int]
) -> None:
    stock, fast = Stock(a, b, c), Fast(a, b, c)
    assert dataclasses.astuple(fast) == dataclasses.astuple(stock)
    assert Fast(a=a, b=b, c=c) == fast  # keywords too
    # The stock dataclass is the independent side: same fields, so the same hash (frozen
    # dataclasses hash their field tuple, whatever the class), and values that differ differ.
    assert hash(fast) == hash(stock)
    assert hash(Fast(a, b, c)) == hash(fast)
    assert Fast(a + 1, b, c) != fast and Stock(a + 1, b, c) != stock
    assert repr(fast) == repr(stock).replace("Stock", "Fast")


def test_still_frozen_and_still_strict_about_arguments() -> None:
    fast = Fast(1, "x", ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        Fast(1, "x")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast(1, "x", (), 4)  # type: ignore[call-arg]
    match fast:
        case Fast(a, b, c):
            assert (a, b, c) == (1, "x", ())
        case _:
            pytest.fail("positional match")


def test_refuses_what_it_would_get_wrong() -> None:
    with pytest.raises(TypeError, match="defaults"):

        @fast_init
        @dataclass(frozen=True, slots=True)
        class WithDefault:
            a: int = 0

    with pytest.raises(TypeError, match="frozen, slotted"):

        @fast_init
        @dataclass(slots=True)
        class NotFrozen:
            a: int

    with pytest.raises(TypeError, match="__post_init__"):

        @fast_init
        @dataclass(frozen=True, slots=True)
        class Checked:
            a: int

            def __post_init__(self) -> None:
                pass


def test_the_hot_messages_use_it() -> None:
    for cls in (Heartbeat, CommitPartition, OffsetCommit):
        first = dataclasses.fields(cls)[0].name
        assert f"_set_{first}" in cls.__init__.__globals__, cls
    hb = Heartbeat("g", 1, "m", None)
    assert (hb.group_id, hb.generation_id, hb.member_id, hb.group_instance_id) == (
        "g",
        1,
        "m",
        None,
    )


@dataclass(frozen=True, slots=True)
class WithDefaults:
    a: int
    b: str | None = None
    c: tuple[int, ...] = dataclasses.field(default_factory=tuple)


_replace_fast = fast_replace(Fast)
_replace_defaults = fast_replace(WithDefaults)


@given(st.integers(), st.none() | st.text(), st.tuples(st.integers()), st.data())
def test_fast_replace_is_dataclasses_replace(
    a: int, b: str | None, c: tuple[int], data: st.DataObject
) -> None:
    cases = ((Fast(a, b, c), _replace_fast), (WithDefaults(a, b, c), _replace_defaults))
    for obj, replace in cases:
        changes = data.draw(
            st.fixed_dictionaries(
                {}, optional={"a": st.integers(), "b": st.none() | st.text(), "c": st.tuples()}
            )
        )
        new = replace(obj, **changes)
        assert type(new) is type(obj)
        assert dataclasses.astuple(new) == dataclasses.astuple(dataclasses.replace(obj, **changes))
        assert new == dataclasses.replace(obj, **changes)
        with pytest.raises(dataclasses.FrozenInstanceError):
            new.a = 0  # type: ignore[misc]


def test_fast_replace_refuses_what_replace_would_and_classes_it_cannot_copy() -> None:
    with pytest.raises(TypeError):
        _replace_fast(Fast(1, "x", ()), d=4)
    with pytest.raises(TypeError):
        _replace_fast(Fast(1, "x", ()), 2)

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    with pytest.raises(TypeError):
        fast_replace(NoSlots)
