"""Headless Chromium for tests: load a URL, get the DOM after the page rendered.

    from tests.support.browser import chromium, dump_dom
    html = dump_dom("http://127.0.0.1:9108/")          # raises BrowserMissing if none installed

Debian's `chromium` (tests/support/peers.py installs it when it is missing and we are root). The
flags are
the ones this kind of machine needs: no sandbox (we run as root in a container), no GPU, and no
background networking, component updates, sync or QUIC, whose connections the closed network
refuses. Each call gets a fresh, throw-away profile (--user-data-dir), so runs never share state.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


# Why a browser test skips: `make peers` installs Debian's chromium only when run as root.
MISSING = (
    "chromium is not installed: `make peers` installs Debian's package only as root; install it "
    "(apt-get install chromium) or set GROUPCOORD_CHROMIUM to a Chromium binary"
)


class BrowserMissing(RuntimeError):
    pass


def chromium() -> str | None:
    """Path of a Chromium binary: $GROUPCOORD_CHROMIUM, else the first on PATH."""
    override = os.environ.get("GROUPCOORD_CHROMIUM")
    if override:
        return override if Path(override).is_file() else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def dump_dom(
    url: str,
    *,
    width: int = 1280,
    height: int = 900,
    timeout_s: float = 60.0,
    extra_flags: tuple[str, ...] = (),
) -> str:
    """Load `url` in headless Chromium and return the serialized DOM (`--dump-dom`).

    `width`/`height` set the window (e.g. 390x844 for a phone). Raises BrowserMissing when no
    Chromium is installed, RuntimeError when it fails (with its stderr)."""
    binary = chromium()
    if binary is None:
        raise BrowserMissing(MISSING)
    with tempfile.TemporaryDirectory(prefix="groupcoord-chromium-") as profile:
        cmd = [
            binary,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            *extra_flags,
            "--dump-dom",
            url,
        ]
        proc = subprocess.run(
            cmd, capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL, check=False
        )
    if proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"chromium exited with {proc.returncode}: {stderr}")
    return proc.stdout.decode("utf-8", errors="replace")


def screenshot(url: str, path: Path, *, width: int = 390, height: int = 844) -> Path:
    """Save a PNG of `url` as rendered at width x height (for looking at a page by hand)."""
    binary = chromium()
    if binary is None:
        raise BrowserMissing(MISSING)
    with tempfile.TemporaryDirectory(prefix="groupcoord-chromium-") as profile:
        subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "--hide-scrollbars", f"--screenshot={path}", url],
            capture_output=True, timeout=60, stdin=subprocess.DEVNULL, check=True,
        )  # fmt: skip
    return path
