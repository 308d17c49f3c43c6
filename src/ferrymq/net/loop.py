"""Event loop choice: uvloop when installed, since it roughly doubles small-frame throughput."""

from __future__ import annotations

import asyncio


def install_uvloop() -> bool:
    """Make new event loops uvloop ones; return False (and change nothing) when uvloop is missing."""
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True
