"""storage.iothread: jobs in order, futures for `submit`, and a thread that ends with its owner."""

from __future__ import annotations

import gc
import threading

import pytest

from storage.iothread import IoThread


def test_jobs_run_in_submission_order_on_one_thread_and_futures_carry_the_outcome() -> None:
    io = IoThread("test-io")
    seen: list[tuple[int, str]] = []
    for i in range(50):
        io.post(lambda i=i: seen.append((i, threading.current_thread().name)))
    ok = io.submit(lambda a, b: a + b, 2, b=3)
    failed = io.submit(lambda: 1 // 0)
    assert ok.result(timeout=5) == 5
    with pytest.raises(ZeroDivisionError):
        failed.result(timeout=5)
    assert [i for i, _ in seen] == list(range(50))  # posted before the submits, so all done
    assert {name for _, name in seen} == {"test-io"}
    io.shutdown(wait=True)
    with pytest.raises(RuntimeError):
        io.submit(int)


def test_a_failing_posted_job_is_logged_and_the_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    io = IoThread("test-io")
    io.post(lambda: 1 // 0)
    assert io.submit(lambda: "still here").result(timeout=5) == "still here"
    assert "I/O thread job failed" in caplog.text
    io.shutdown()


def test_an_executor_dropped_without_shutdown_ends_its_thread() -> None:
    io = IoThread("test-io-dropped")
    thread = io._thread
    assert io.submit(int).result(timeout=5) == 0
    del io
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()
