"""What a sidecar knows of the upstream cluster's topics, and whether the upstream answers.

`ClusterView` is fed every Metadata answer that passes through (`observe(response, full=False)`)
and the sidecar's periodic refreshes of every topic (`full=True`), and tells the server
(`Server.topic_changed`, `Server.delete_topic_offsets`) when a topic appears, changes or goes.
The rule that matters (issue 24: an upstream restarted empty must cost no offsets) is in
`observe`'s docstring. It also keeps the refreshes' outcome: `/readyz` and `/upstream`.

Loop thread only; no I/O of its own (the sidecar's refresh loop asks the upstream).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from coordinator.core.topics import TopicInfo
from coordinator.sidecar import rewrite

if TYPE_CHECKING:
    from coordinator.serve.server import Server

log = logging.getLogger("groupcoord.sidecar")


MIN_ABSENT_REFRESHES = 2  # complete refreshes a topic must be absent from before its offsets go


def complete_refresh(response: Any, full: bool) -> bool:
    """Whether a Metadata answer may prove a topic absent: it answers a refresh of every topic
    (`full`) and names at least one broker. No cluster answers all its topics without naming a
    broker; one that names none (a broker starting up, an upstream being restarted) is partial."""
    return full and bool(response.brokers)


def offsets_deletable(answers: int, absent_ms: float, delete_after_ms: int) -> bool:
    """Whether a topic absent from `answers` complete refreshes over `absent_ms` has surely been
    deleted (`observe`): absent from at least MIN_ABSENT_REFRESHES of them, for the whole delay.
    One answer alone is never enough, whatever the delay: it may come from a broker that has not
    loaded its topics yet."""
    return answers >= MIN_ABSENT_REFRESHES and absent_ms >= delete_after_ms


# Not under mutation testing: the view's state drives the server (topic_changed, offsets
# deleted) on the event loop's clock; its rules are the pure functions around it, and the class
# is held end to end by tests/sidecar/test_topic_safety.py and test_topic_lookup.py.
# pragma: no mutate start
class ClusterView:
    def __init__(
        self, server: Server, delete_after_ms: int, refresh_soon: Callable[[], None]
    ) -> None:
        self.server = server
        self.delete_after_ms = delete_after_ms
        self._refresh_soon = refresh_soon
        self.topics: dict[str, TopicInfo] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        # Topics absent from complete refreshes, their offsets kept: name -> (first seen absent
        # on the loop's clock, answers lacking it since, the topic as it was; see `observe`).
        self._absent: dict[str, tuple[float, int, TopicInfo | None]] = {}
        # The upstream as the refreshes saw it: None until the first answer, then True/False.
        self.answered: bool | None = None
        self.error = "no answer yet"
        self.refreshes = 0  # complete metadata refreshes answered

    def refreshed(self) -> None:
        self.refreshes += 1
        self.answered = True
        self.error = ""

    def refresh_failed(self, exc: Exception) -> None:
        self.answered = False
        self.error = str(exc) or type(exc).__name__

    def readiness(self) -> tuple[bool, str]:
        """Ready once the upstream answered a metadata refresh, and unready while it does not
        (`/readyz`: a sidecar whose upstream is unreachable would hand its application a stream
        of disconnects)."""
        if self.answered is None:
            return False, f"upstream: {self.error}"
        if not self.answered:
            return False, f"upstream unreachable: {self.error}"
        return True, "ready"

    def status(self) -> dict[str, Any]:
        return {
            "state": {None: "not answered yet", True: "reachable", False: "unreachable"}[
                self.answered
            ],
            "error": self.error,
            "refreshes": self.refreshes,
            "topics": len(self.topics),
            "topics_absent": sorted(self._absent),
        }

    def observe(self, response: Any, full: bool) -> None:
        """Learn the topics of a Metadata answer; tell the server about changed topics.

        A topic absent from a complete refresh (`full`: all topics, naming at least one broker)
        is gone for the clients and the groups at once (the catalog drops it; Fetch answers
        UNKNOWN_TOPIC_OR_PARTITION; its readers rebalance), but its committed offsets are
        deleted only when the deletion is certain (Kafka deletes them with the topic): when a
        DeleteTopics for it passes through (`topics_deleted`), when it comes back under a new
        topic id, or when it has stayed absent from every complete refresh for
        `topic_delete_after_ms` and from at least two of them. A failed refresh proves nothing
        and resets nothing. An upstream restarted empty, or answering before its topics are
        loaded, so costs a rebalance but no offsets, unless it stays so for the whole delay; a
        topic back under its own id keeps them. A client's answer saying a known topic does not
        exist, or showing a partition count we do not have (Metadata < v10 carries no topic
        id), or a topic we do not know without its id, only brings the next refresh forward."""
        infos, missing, leaders = rewrite.topic_infos(response)
        self.leaders.update(leaders)
        for info in infos:
            self._came_back(info)
            cached = self.topics.get(info.name)
            if cached == info:
                continue
            if cached is not None and _new_id(cached, info):
                log.info("upstream topic %s was re-created (new topic id)", info.name)
                self._forget(info.name)  # the old topic's offsets go, as with Kafka
            self.topics[info.name] = info
            self._topic_changed(info.name, info)
        if not full:
            for topic in response.topics:
                cached = self.topics.get(topic.name)
                if cached is None and topic.error_code == 0 and topic.name and _no_id(topic):
                    # A topic new to us, in an answer without topic ids (Metadata < v10, as
                    # aiokafka asks): its client knows it now, so learn it now too (issue 40).
                    self._refresh_soon()
                elif cached is not None and (
                    topic.name in missing
                    or (topic.error_code == 0 and len(topic.partitions) != cached.partitions)
                ):
                    self._refresh_soon()
            return
        if not complete_refresh(response, full):
            return  # partial: proves nothing about absent topics
        present = {t.name for t in response.topics if t.name not in missing}
        now = asyncio.get_running_loop().time()
        for name in self.topics.keys() - present:  # newly absent: gone, offsets kept
            gone = self.topics[name]
            log.info(
                "upstream topic %s absent: gone for clients and groups; its offsets are "
                "deleted if it stays absent %.0f s",
                name,
                self.delete_after_ms / 1000,
            )
            self._drop(name)
            self._absent[name] = (now, 0, gone)
            self.server.topic_changed(name, None, keep_offsets=True)
        for name in [n for n in self._absent if n not in present]:
            first, answers, was = self._absent[name]
            answers += 1
            self._absent[name] = (first, answers, was)
            elapsed = now - first
            if offsets_deletable(answers, elapsed * 1000, self.delete_after_ms):
                log.info(
                    "upstream topic %s absent from %d refreshes over %.0f s: deleting its offsets",
                    name,
                    answers,
                    elapsed,
                )
                del self._absent[name]
                self.server.delete_topic_offsets(name)

    def _came_back(self, info: TopicInfo) -> None:
        """A topic absent from earlier refreshes is listed again: under a new id its offsets go
        (the old topic was deleted); under its own, they stay."""
        absent = self._absent.pop(info.name, None)
        if absent is None:
            return
        before = absent[2]
        if before is not None and _new_id(before, info):
            log.info("upstream topic %s came back re-created (new topic id)", info.name)
            self.server.delete_topic_offsets(info.name)
        else:
            log.info("upstream topic %s is back; its offsets were kept", info.name)

    def topics_deleted(self, names: Iterable[str]) -> None:
        """A DeleteTopics passed through and the upstream deleted `names`: certain at once."""
        for name in names:
            if name in self.topics:
                self._forget(name)
            elif self._absent.pop(name, None) is not None:
                self.server.delete_topic_offsets(name)

    def restore(self, catalog: Iterable[TopicInfo]) -> None:
        """At start-up: the topics the log restored (a topic deleted upstream meanwhile is then
        noticed as gone), and the ones it no longer lists but still holds offsets of."""
        self.topics = {t.name: t for t in catalog}
        self.absent_since_start()

    def absent_since_start(self) -> None:
        """Topics with committed offsets that the log's catalog no longer lists (absent when
        groupcoord stopped): their deletion was not certain then, and is judged again."""
        now = asyncio.get_running_loop().time()
        for name in self.server.core.offset_topics() - self.topics.keys():
            self._absent.setdefault(name, (now, 0, None))

    def _drop(self, name: str) -> None:
        del self.topics[name]
        for key in [k for k in self.leaders if k[0] == name]:
            del self.leaders[key]

    def _forget(self, name: str) -> None:
        self._drop(name)
        self._absent.pop(name, None)
        self._topic_changed(name, None)

    def _topic_changed(self, name: str, info: TopicInfo | None) -> None:
        log.info(
            "upstream topic %s %s",
            name,
            "gone" if info is None else f"has {info.partitions} partitions ({info.topic_id})",
        )
        self.server.topic_changed(name, info)


# pragma: no mutate end
def _new_id(before: TopicInfo, now: TopicInfo) -> bool:
    return bool(before.topic_id.int) and bool(now.topic_id.int) and before.topic_id != now.topic_id


def _no_id(topic: Any) -> bool:
    """A Metadata < v10 answer's topic: it carries no topic id field at all (one with an id the
    refresh learns it from; a zero id would make every answer bring a refresh forward)."""
    return getattr(topic, "topic_id", None) is None
