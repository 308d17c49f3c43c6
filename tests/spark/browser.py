"""Headless Chromium for checking the HTML the Spark jobs write: Debian's chromium, installed with
apt-get when missing (Playwright's own browser download is not used)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def chromium() -> str:
    """The chromium binary, installed from Debian first if absent."""
    if found := shutil.which("chromium"):
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "CI": "true"}
    for command in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
    ):
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr.decode(errors='replace')[-2000:]}")
    found = shutil.which("chromium")
    if found is None:
        raise RuntimeError("apt-get installed chromium but no chromium is on PATH")
    return found


def render(page: Path, screenshot: Path, timeout: float = 120) -> str:
    """The DOM of `page` after Chromium ran it (headless, no network); a PNG of it at `screenshot`."""
    browser = chromium()
    common = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
              f"--user-data-dir={screenshot.parent / 'chromium-profile'}"]  # fmt: skip
    shot = subprocess.run([*common, f"--screenshot={screenshot}", "--window-size=1200,3000", page.as_uri()],
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
    if shot.returncode != 0 or not screenshot.exists():
        raise AssertionError(
            f"chromium could not render {page}:\n{shot.stderr.decode(errors='replace')[-2000:]}"
        )
    dom = subprocess.run([*common, "--dump-dom", page.as_uri()], capture_output=True, timeout=timeout,
                         stdin=subprocess.DEVNULL)  # fmt: skip
    if dom.returncode != 0:
        raise AssertionError(f"chromium --dump-dom failed:\n{dom.stderr.decode(errors='replace')[-2000:]}")
    return dom.stdout.decode()
