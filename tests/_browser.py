"""Headless Chromium for the tests that look at a page as a reader would (`.ci/run` installs Debian's package)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(
    BROWSER is None, reason="no Chromium: `apt-get install chromium` (.ci/run installs it)"
)


def headless(page: Path, *flags: str, timeout: int = 180) -> subprocess.CompletedProcess:
    """Open `page` in headless Chromium with the network off (every http(s) request goes to a closed local
    port) and console messages on stderr; `flags` say what to do (``--dump-dom``, ``--screenshot=FILE``)."""
    res = subprocess.run(
        [
            BROWSER,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--proxy-server=127.0.0.1:9",
            "--enable-logging=stderr",
            "--v=0",
            "--hide-scrollbars",
            *flags,
            Path(page).resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res


def console(res: subprocess.CompletedProcess, pattern: str = r"") -> list[str]:
    """The page's console messages (those matching `pattern`, case-insensitive)."""
    return [line for line in res.stderr.splitlines() if "CONSOLE" in line and re.search(pattern, line, re.I)]
