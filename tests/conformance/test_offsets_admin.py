"""Offsets (commit, fetch, delete) and the admin APIs (ListGroups, DescribeGroups, DeleteGroups,
FindCoordinator, ApiVersions' group entries) at every version both servers accept, compared."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.conformance import flows
from tests.conformance import harness as h
from tests.support.sidecar_util import kio


@pytest.mark.parametrize("version", range(2, 10))
async def test_simple_group_commit_and_fetch(env: h.Env, version: int) -> None:
    """A simple group (no members, generation -1): commit, fetch some, fetch all, fetch unknown
    partitions and topics, commit to an unknown topic and partition, metadata too large."""
    fetch_v = max(1, version - 1)
    async with env.sequence() as s:
        await s.one("A", h.offset_fetch(fetch_v, topics={"t1": [0]}))  # no group yet
        await s.one("A", h.commit(version, offsets={"t1": {0: 10, 1: 11}, "t2": {0: 20}},
                                  metadata="meta"))
        await s.one("A", h.offset_fetch(fetch_v, topics={"t1": [0, 1, 2], "t2": [0]}))
        if fetch_v >= 2:
            await s.one("A", h.offset_fetch(fetch_v, topics=None))
        await s.one("A", h.commit(version, offsets={"t1": {0: 12, 7: 1}}))
        await s.one("A", h.commit(version, offsets={"t1": {1: 13}}, metadata="x" * 4097))
        await s.one("A", h.commit(version, offsets={"t1": {2: 14}}, metadata=None))
        await s.one("A", lambda side: _commit_unknown_topic(side, version))
        await s.one("A", h.offset_fetch(fetch_v, topics={"t1": [0, 1, 2, 9]}))
        await s.one("A", h.describe(min(version, 5)))
        await s.one("A", h.list_groups(min(version, 5)))


def _commit_unknown_topic(side: h.Side, version: int) -> Any:
    """A commit to a topic neither server has."""
    entity = h.commit(version, offsets={"t1": {0: 1}})(side)
    topic = dataclasses.replace(entity.topics[0], name=side.env.prefix + "missing")
    return dataclasses.replace(entity, topics=(topic,))


@pytest.mark.parametrize("version", [1, 3, 5, 7, 8, 9])
async def test_member_commits_and_fetches(env: h.Env, version: int) -> None:
    """A classic group's member commits with its generation; an admin commit (generation -1) to a
    non-empty group, an unknown member's and a stale generation's commits; fetch with
    require_stable."""
    commit_v = min(version + 1, 9)
    async with env.sequence() as s:
        joined = await flows.join(s, ["A"])
        await flows.sync(s, joined)
        gen = joined["A"]["generation_id"]
        offsets = {"t1": {0: 3}}
        await s.one("A", h.commit(commit_v, who="A", generation=gen, offsets=offsets))
        await s.one("B", h.commit(commit_v, offsets=offsets))  # generation -1, not empty
        await s.one("B", h.commit(commit_v, who="B", generation=gen, member_id="nobody",
                                  offsets=offsets))
        await s.one("A", h.commit(commit_v, who="A", generation=gen + 5, offsets=offsets))
        await s.one("A", h.offset_fetch(version, topics={"t1": [0]}, require_stable=True))
        await s.one("A", h.offset_fetch(version, topics=None))


async def test_offset_delete(env: h.Env) -> None:
    """OffsetDelete: unknown group; a Stable group subscribed to t1 (t1's offsets refused, t2's
    deleted); after everyone left; a partition never committed; an unknown topic."""
    async with env.sequence() as s:
        await s.one("A", h.offset_delete(topics={"t1": [0]}))
        joined = await flows.join(s, ["A"])
        await flows.sync(s, joined)
        gen = joined["A"]["generation_id"]
        await s.one("A", h.commit(who="A", generation=gen,
                                  offsets={"t1": {0: 1, 1: 2}, "t2": {0: 3}}))
        await s.one("A", h.offset_delete(topics={"t1": [0], "t2": [0]}))
        await s.one("A", h.offset_fetch(topics=None))
        await s.one("A", h.leave(5, "g", ("A", None)))
        await s.one("A", h.offset_delete(topics={"t1": [0, 2]}))
        await s.one("A", h.offset_fetch(topics={"t1": [0, 1, 2], "t2": [0]}))


@pytest.mark.parametrize("version", range(6))
async def test_list_and_describe_groups(env: h.Env, version: int) -> None:
    """ListGroups with and without states/types filters, DescribeGroups of groups in several
    states, of an unknown group and of an empty group id."""
    groups = ("stable", "empty", "completing", "simple", "consumer")
    async with env.sequence(groups) as s:
        joined = await flows.join(s, ["A"], group="stable")
        await flows.sync(s, joined, group="stable")
        await flows.join(s, ["B"], group="completing")
        await flows.join(s, ["C"], group="empty")
        await s.one("C", h.leave(5, "empty", ("C", None)))
        await s.one("D", h.commit(group="simple", offsets={"t1": {0: 1}}))
        await s.one("E", h.cg_heartbeat(group="consumer", who="E", epoch=0, topics=("t1",)))
        await s.one("A", h.list_groups(version))
        if version >= 4:
            for states in (("Stable",), ("Empty", "CompletingRebalance"), ("stable",), ("Dead",)):
                await s.one("A", h.list_groups(version, states=states))
        if version >= 5:
            for types in (("classic",), ("consumer",), ("Consumer",), ("share",)):
                await s.one("A", h.list_groups(version, types=types))
            await s.one("A", h.list_groups(version, states=("Stable",), types=("consumer",)))
        await s.one("A", h.describe(version, *groups, "unknown", ""))


@pytest.mark.parametrize("version", range(3))
async def test_delete_groups(env: h.Env, version: int) -> None:
    groups = ("stable", "empty", "simple", "consumer")
    async with env.sequence(groups) as s:
        joined = await flows.join(s, ["A"], group="stable")
        await flows.sync(s, joined, group="stable")
        await flows.join(s, ["C"], group="empty")
        await s.one("C", h.leave(5, "empty", ("C", None)))
        await s.one("D", h.commit(group="simple", offsets={"t1": {0: 1}}))
        await s.one("E", h.cg_heartbeat(group="consumer", who="E", epoch=0, topics=("t1",)))
        await s.one("A", h.delete_groups(version, *groups, "unknown", ""))
        await s.one("A", h.describe(5, *groups))
        await s.one("A", h.delete_groups(version, "empty", "simple"))
        await s.one("E", h.cg_heartbeat(group="consumer", who="E", epoch=-1))
        await s.one("A", h.delete_groups(version, "consumer"))
        await s.one("A", h.list_groups(5))


@pytest.mark.parametrize("version", range(7))
async def test_find_coordinator(env: h.Env, version: int) -> None:
    async with env.sequence(("g", "other")) as s:
        await s.one("A", h.find_coordinator(version, "g"))
        if version >= 4:
            await s.one("A", lambda side: kio(10, version, "FindCoordinatorRequest", key_type=0,
                                              coordinator_keys=(side.group("g"),
                                                                side.group("other"))))


@pytest.mark.parametrize("version", range(3))
async def test_api_versions_of_group_apis(env: h.Env, version: int) -> None:
    """The version ranges of the group APIs (other APIs are the broker mimic's business)."""
    async with env.sequence() as s:
        await s.one("A", lambda side: kio(18, version, "ApiVersionsRequest"))
