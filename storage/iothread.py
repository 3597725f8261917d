"""The log's I/O thread: one worker behind a SimpleQueue, an Executor for `run_in_executor`.

Why not ThreadPoolExecutor(1): its `submit` takes two locks and an idle semaphore that the worker
takes too. The group commit submits a flush from the event loop hundreds of times a second, and the
worker is often between two blocking calls, holding one of those locks while it waits for the GIL,
so the loop blocked in `submit` until the GIL went round: about 4% of the loop's time at 14k
one-partition commits/s (py-spy, bench `commit`). `SimpleQueue.put` never blocks.

Rules: jobs run in submission order. `post` is for a job that reports its own outcome (the flush
calls back into the loop); `submit` returns a concurrent Future, as an Executor's does. The worker
holds no reference to this object, so an executor that is dropped without `shutdown` still ends
its thread (ThreadPoolExecutor does the same with a weakref callback).
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

log = logging.getLogger("groupcoord.storage")

P = ParamSpec("P")
T = TypeVar("T")

_Job = tuple["Future[Any] | None", Callable[..., Any], tuple[Any, ...]]


class IoThread(Executor):
    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=_work, args=(self._queue,), name=name, daemon=True)
        self._thread.start()
        self._shutdown = False
        weakref.finalize(self, self._queue.put, None)

    def post(self, fn: Callable[..., object], *args: Any) -> None:
        """Run `fn(*args)` on the thread; nobody waits for it."""
        self._queue.put((None, fn, args))

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: Future[T] = Future()
        self._queue.put((future, lambda: fn(*args, **kwargs), ()))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if not self._shutdown:
            self._shutdown = True
            self._queue.put(None)
        if wait and self._thread is not threading.current_thread():
            self._thread.join()


def _work(jobs: queue.SimpleQueue[_Job | None]) -> None:
    while (job := jobs.get()) is not None:
        future, fn, args = job
        if future is None:
            try:
                fn(*args)
            except BaseException:  # a posted job reports its own failures; this is a bug
                log.exception("I/O thread job failed")
            continue
        if not future.set_running_or_notify_cancel():
            continue
        try:
            result = fn(*args)
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(result)
