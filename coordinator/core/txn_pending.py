"""The pending transactional offsets that CoreState holds (issue 29; the rules are
coordinator.core.txn_offsets'). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterator

from coordinator.core.records import TxnOffsetKey, TxnOffsetValue

Entry = tuple[TxnOffsetKey, TxnOffsetValue]


class PendingOffsets:
    """group -> key -> value: every staged, unsettled transactional offset. No empty group dict."""

    __slots__ = ("_groups", "next_seq")

    def __init__(self) -> None:
        self._groups: dict[str, dict[TxnOffsetKey, TxnOffsetValue]] = {}
        self.next_seq = 0

    def put(self, key: TxnOffsetKey, value: TxnOffsetValue) -> None:
        self._groups.setdefault(key.group_id, {})[key] = value
        self.next_seq = max(self.next_seq, key.seq + 1)

    def delete(self, key: TxnOffsetKey) -> bool:
        entries = self._groups.get(key.group_id)
        if entries is None or entries.pop(key, None) is None:
            return False
        if not entries:
            del self._groups[key.group_id]
        return True

    def entries(self, group_id: str) -> list[Entry]:
        return list(self._groups.get(group_id, {}).items())

    def has(self, group_id: str, topic: str, partition: int) -> bool:
        return any(
            k.topic == topic and k.partition == partition for k in self._groups.get(group_id, ())
        )

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def drop_group(self, group_id: str) -> list[TxnOffsetKey]:
        return list(self._groups.pop(group_id, {}))

    def count(self) -> int:
        return sum(len(e) for e in self._groups.values())

    def all(self) -> Iterator[Entry]:
        for entries in self._groups.values():
            yield from entries.items()
