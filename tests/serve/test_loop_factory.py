"""The conftest's pytest_asyncio_loop_factories hook puts every asyncio test on uvloop."""

from __future__ import annotations

import asyncio

import uvloop


async def test_asyncio_tests_run_on_uvloop() -> None:
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
