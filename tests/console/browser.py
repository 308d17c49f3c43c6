"""Headless Chromium for the console's browser tests: Debian's chromium (installed when missing)
driven by Playwright. Where neither can be had the tests skip, except under CI=true, where they
fail: CI must run them."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from ferrymq.bench.debian import Unavailable, installed


def _cannot(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"the browser tests cannot run in CI: {reason}")
    pytest.skip(reason)


@asynccontextmanager
async def chromium_page() -> AsyncIterator[tuple[Any, Any]]:
    """A new page of a headless Chromium (closed at the end) and Playwright's `expect`."""
    try:
        from playwright.async_api import async_playwright, expect
    except ImportError:
        _cannot("the playwright package is not installed (pip install -e '.[dev]')")
    try:
        binary = installed("chromium", "chromium")
    except Unavailable as e:
        _cannot(str(e))
    expect.set_options(timeout=15_000)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=binary, headless=True)
        try:
            page = await browser.new_page()
            page.set_default_timeout(15_000)
            yield page, expect
        finally:
            await browser.close()
