"""Transport tests run on both event loops: uvloop in production, asyncio's own as the fallback."""

import asyncio

import uvloop


def pytest_asyncio_loop_factories(config, item):
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
