"""Process lifecycle: stderr logging (plain or JSON lines) and signal-driven shutdown.

Shutdown (uvicorn's server.py is the model):
- The first SIGTERM or SIGINT sets `Signals.stopping`; `serve` then calls `Server.stop()`, which
  stops accepting, releases replies held for durability, answers requests still parked in the core
  with NOT_COORDINATOR (clients re-discover the coordinator and retry, docs/protocol.md §9.1) and
  closes connections; then the log is closed (flush + fsync). Exit code 0.
- A watchdog thread, started with the first signal, ends the process with exit code 1 if that has
  not finished within the shutdown deadline: a thread, because a hung fsync or a blocked loop
  would never run a loop callback, and `os._exit`, because interpreter exit joins the log's I/O
  thread, which is exactly what may hang.
- A second signal ends the process at once with 128 + the signal number (the shell's convention).

Start-up problems are one line naming the setting (`data_dir_problem` says what is wrong with a
data dir). Logs go to stderr only. `json` writes one object per line: ts, level, logger, msg, plus
every `extra=` field of the call (e.g. the rebalance line's group_id, generation_id, cause).
"""

from __future__ import annotations

import asyncio
import errno
import importlib.metadata
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TextIO


def installed_version(dist: str = "groupcoord") -> str:
    """An installed distribution's version (groupcoord's is pyproject.toml's)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:  # run from a source tree never installed
        return "unknown (not installed)"


log = logging.getLogger("groupcoord")

WATCHDOG_THREAD = "groupcoord-shutdown-watchdog"  # named: thread dumps say what it is

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys() | {"message", "asctime"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per line (no embedded newlines: tracebacks go in the `exc` field)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


class PlainFormatter(logging.Formatter):
    """`2024-01-01 12:00:00,000 INFO groupcoord.server: msg key=value ...` (extras appended)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = [
            f"{key}={value}" for key, value in vars(record).items() if key not in _STANDARD_ATTRS
        ]
        if extras and "\n" not in text:
            text += " " + " ".join(extras)
        return text


def setup_logging(level: str, fmt: str, stream: TextIO | None = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else PlainFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    # The fleet's aiokafka clients (coordinator.sidecar.fleet) log every metadata update and
    # rejoin at INFO; ours say what matters (partitions taken, fenced, failed). Theirs show
    # from WARNING on, or everything at DEBUG.
    logging.getLogger("aiokafka").setLevel(
        logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING
    )


class OncePerKey:
    """A log line the first time a key (a client) is seen, then at most one per `interval_s` for
    that key, saying how many repeats were not logged in between. A client that retries what we
    refuse in a loop (kafka-python pinned to api_version 0.9 reconnected 67 times in 7 s) costs one
    line, not one per attempt. At most `max_keys` keys are remembered (the oldest go first), so
    a crowd of clients cannot grow it."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        level: int = logging.WARNING,
        interval_s: float = 60.0,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._logger = logger
        self._level = level
        self._interval_s = interval_s
        self._max_keys = max_keys
        self._clock = clock
        self._keys: dict[Hashable, list[float]] = {}  # key -> [last logged at, repeats since]

    def log(self, key: Hashable, msg: str, *args: object) -> bool:
        """Log `msg % args` for `key` unless it was logged less than `interval_s` ago (then it is
        only counted). True when a line was written."""
        now = self._clock()
        seen = self._keys.get(key)
        if seen is None:
            if len(self._keys) >= self._max_keys:
                del self._keys[next(iter(self._keys))]
            self._keys[key] = [now, 0]
            self._logger.log(self._level, msg, *args)
            return True
        last, repeats = seen
        if now - last < self._interval_s:
            seen[1] = repeats + 1
            return False
        seen[0], seen[1] = now, 0
        if repeats:
            msg += " (and %d more times in the last %.0f s, not logged)"
            args = (*args, int(repeats), now - last)
        self._logger.log(self._level, msg, *args)
        return True


class Signals:
    """SIGTERM/SIGINT handling for `serve`: first = graceful stop, second = exit now."""

    def __init__(self, deadline_ms: int) -> None:
        self.deadline_ms = deadline_ms
        self.stopping = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._watchdog: threading.Timer | None = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.stopping.is_set():
            log.warning("received %s again: exiting now", sig.name)
            _exit(128 + sig.value)
            # Unreachable unless _exit is replaced (tests): then a second watchdog must not be
            # armed over the first, which close() would never cancel.
            return
        log.info("received %s: shutting down (deadline %d ms)", sig.name, self.deadline_ms)
        self.stopping.set()
        self._watchdog = threading.Timer(self.deadline_ms / 1000, self._overdue)
        self._watchdog.name = WATCHDOG_THREAD
        self._watchdog.daemon = True
        self._watchdog.start()

    def _overdue(self) -> None:
        log.error("shutdown did not finish within %d ms: exiting", self.deadline_ms)
        _exit(1)

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._loop.remove_signal_handler(sig)


def _exit(code: int) -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(code)


def data_dir_problem(origin: str, data_dir: str, exc: OSError) -> str:
    """The one line for a data dir the log cannot use (`origin`: the setting as the user wrote
    it, Settings.origin): what is wrong with the directory, not only the errno."""
    blocker = _first_non_directory(Path(data_dir))
    if blocker is not None:
        what = "is a file" if blocker == Path(data_dir) else f"is under {blocker}, a file"
        return (
            f"{origin}: {data_dir} {what}, not a directory (name a directory; it is created"
            " if missing)"
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        reason = "read-only file system" if exc.errno == errno.EROFS else "permission denied"
        return (
            f"{origin}: {data_dir} is not writable ({reason}: {exc.filename or data_dir}); the "
            "group log is appended to there: give the user groupcoord runs as write access to "
            "the directory and its files, or name another directory"
        )
    return f"{origin}: cannot use {data_dir} for the group log: {exc.strerror or exc}"


def _first_non_directory(path: Path) -> Path | None:
    """`path` or the nearest of its parents that exists but is not a directory, if any."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return None if candidate.is_dir() else candidate
    return None
