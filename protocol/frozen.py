"""`fast_init`: a quicker `__init__` for the frozen, slotted dataclasses made on every request.

A frozen dataclass's generated `__init__` sets each field through `object.__setattr__` (looked
up on every call), which makes it about three times as slow as a plain class's. The commands,
results and records of the two hottest requests (Heartbeat, OffsetCommit) are made a dozen
times per request, which measured 5% of a commit's CPU. `fast_init` replaces that `__init__`
with one that stores each argument straight into its slot (the slot descriptor's `__set__`);
everything else -- immutability (`FrozenInstanceError` on assignment), `__eq__`, `__hash__`,
`__repr__`, `__match_args__` -- is the dataclass's own.

Only for the plain case: every field in `__init__`, no defaults, no `__post_init__`; anything
else is refused when the class is decorated, so a later field with a default cannot be silently
dropped.

`fast_replace(cls)` makes the matching `dataclasses.replace` for one such class (defaults
allowed, every field in `__init__`): `replace` looks up the class's fields, builds a dict of
changes and calls `__init__` with keywords on every call, about 10 us for the 15 fields of a
KIP-848 member, made twice per reconciling heartbeat (cProfile of a forming group).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _check(cls: type, what: str) -> None:
    """The guard both generators share: they set slots directly, so the class must be a frozen,
    slotted dataclass, and they never call `__post_init__`."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__}: {what} is for frozen, slotted dataclasses")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: {what} does not call __post_init__")


def fast_init(cls: type[T]) -> type[T]:
    """Decorate *above* `@dataclass(frozen=True, slots=True)`."""
    _check(cls, "fast_init")
    names = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init or f.default is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: fast_init takes no defaults")
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: fast_init takes no defaults")
        names.append(f.name)
    setters: dict[str, Any] = {f"_set_{n}": cls.__dict__[n].__set__ for n in names}
    body = "".join(f"    _set_{n}(self, {n})\n" for n in names) or "    pass\n"
    source = f"def __init__(self, {', '.join(names)}):\n{body}"
    exec(source, setters)  # a fixed template over the class's own field names
    init = setters["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


class _Unchanged:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<unchanged>"


_UNCHANGED = _Unchanged()


def fast_replace(cls: type[T]) -> Callable[..., T]:
    """`dataclasses.replace` for one frozen, slotted dataclass: `fast_replace(C)(obj, **changes)`
    is `dataclasses.replace(obj, **changes)`; an unknown field is a TypeError, as there."""
    _check(cls, "fast_replace")
    names = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if not f.init:
            raise TypeError(f"{cls.__name__}.{f.name}: fast_replace needs every field in __init__")
        if f.name in ("_obj", "_new"):
            raise TypeError(f"{cls.__name__}.{f.name}: a name fast_replace uses itself")
        names.append(f.name)
    env: dict[str, Any] = {f"_set_{n}": cls.__dict__[n].__set__ for n in names}
    env.update(_cls=cls, _alloc=object.__new__, _U=_UNCHANGED)
    body = "".join(f"    _set_{n}(_new, _obj.{n} if {n} is _U else {n})\n" for n in names)
    source = (
        f"def replace(_obj, /, *, {', '.join(f'{n}=_U' for n in names)}):\n"
        f"    _new = _alloc(_cls)\n{body}    return _new\n"
    )
    exec(source, env)  # a fixed template over the class's own field names
    replace: Callable[..., T] = env["replace"]
    replace.__qualname__ = f"{cls.__qualname__}.replace"
    replace.__module__ = cls.__module__
    return replace
