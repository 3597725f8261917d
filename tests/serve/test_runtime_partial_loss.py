"""The runtime over a journal whose appends fail one at a time (a sidecar fleet's: one state
partition fenced while the others write): only the replies that depended on a lost append fail;
the others are released once durable, in order, whether the journal calls back or is waited on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.messages import (
    CommitPartition,
    CommitTopic,
    OffsetCommit,
    OffsetCommitResult,
    Result,
)
from coordinator.core.records import Record
from coordinator.serve.runtime import Runtime
from tests.support.fakeclock import EPOCH, catalog


class SplitJournal:
    """Each append stays open until the test resolves it, written or lost."""

    def __init__(self, calls_back: bool) -> None:
        self._seq = 0
        self.open: dict[int, None] = {}
        self.failed: set[int] = set()
        self._changed = asyncio.Event()
        self._calls_back = calls_back
        self._listener: Callable[[int], None] | None = None

    def append(self, records: list[Record]) -> int:
        self._seq += 1
        self.open[self._seq] = None
        return self._seq

    def durable_seq(self) -> int:
        return next(iter(self.open), self._seq + 1) - 1

    def last_seq(self) -> int:
        return self._seq

    async def wait_durable(self, seq: int) -> None:
        while seq in self.open:
            self._changed.clear()
            await self._changed.wait()
        if seq in self.failed:
            raise RuntimeError("that partition was fenced")

    def on_durable(self, listener: Callable[[int], None]) -> None:
        self._listener = listener

    def lost(self, seq: int) -> bool:
        return seq in self.failed

    def resolve(self, seq: int, written: bool) -> None:
        del self.open[seq]
        if not written:
            self.failed.add(seq)
        self._changed.set()
        if self._calls_back and self._listener is not None:
            self._listener(self.durable_seq())


def commit(group: str, offset: int) -> OffsetCommit:
    return OffsetCommit(group, -1, "", None, -1,
                        (CommitTopic("orders", (CommitPartition(0, offset, -1, None),)),), 9)


@pytest.mark.parametrize("calls_back", [True, False], ids=["listener", "waiter"])
async def test_only_the_replies_of_a_lost_append_fail(calls_back: bool) -> None:
    journal = SplitJournal(calls_back)
    core = GroupCoordinator(CoordinatorConfig(), catalog(), lambda p: p, EPOCH)
    answered: dict[int, Result] = {}
    failed: dict[int, BaseException] = {}
    runtime = Runtime(core, journal, respond=answered.__setitem__, fail=failed.__setitem__)
    for reply_to, (group, offset) in enumerate([("a", 1), ("b", 2), ("c", 3)], start=1):
        runtime.submit(reply_to, commit(group, offset))
    assert list(journal.open) == [1, 2, 3] and not answered and not failed

    journal.resolve(3, written=True)  # written, but after two undecided appends: held
    await asyncio.sleep(0)
    assert not answered and not failed
    journal.resolve(1, written=False)  # this partition was fenced

    async def settled() -> bool:
        while 1 not in failed or 3 in journal.open or 2 in journal.open:
            await asyncio.sleep(0)
            if 1 in failed and 2 not in answered and 2 in journal.open:
                journal.resolve(2, written=True)
        return True

    await asyncio.wait_for(settled(), 5)
    await asyncio.wait_for(runtime.drain(), 5)
    assert set(failed) == {1}
    assert set(answered) == {2, 3}
    assert all(isinstance(r, OffsetCommitResult) for r in answered.values())
    runtime.close()


class RefusingJournal(SplitJournal):
    """A fleet journal's append for a state partition this member does not own: lost at once,
    and "durable" already (durable_seq moves past a lost append)."""

    def append(self, records: list[Record]) -> int:
        self._seq += 1
        self.failed.add(self._seq)
        return self._seq


async def test_an_append_refused_at_once_is_never_acknowledged() -> None:
    journal = RefusingJournal(calls_back=False)
    core = GroupCoordinator(CoordinatorConfig(), catalog(), lambda p: p, EPOCH)
    answered: dict[int, Result] = {}
    failed: dict[int, BaseException] = {}
    runtime = Runtime(core, journal, respond=answered.__setitem__, fail=failed.__setitem__)
    runtime.submit(1, commit("a", 1))
    assert set(failed) == {1} and not answered
    outcome: list[str] = []
    from coordinator.core.effects import Effects
    from coordinator.core.records import OffsetCommitKey, OffsetCommitValue

    record = Record(OffsetCommitKey("a", "orders", 0), OffsetCommitValue(1, -1, "", 0, None))
    runtime.apply_then(Effects(records=[record]), lambda: outcome.append("done"),
                       lambda exc: outcome.append("failed"))
    assert outcome == ["failed"]
    runtime.close()
