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

Logs go to stderr only. `json` writes one object per line: ts, level, logger, msg, plus every
`extra=` field of the call (e.g. the rebalance line's group_id, generation_id, cause).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import threading
import time
from typing import Any, TextIO

log = logging.getLogger("groupcoord")

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
