"""Fixtures shared by every test package."""

import pytest

from ferrymq.net import RemotingClient


@pytest.fixture
async def client():
    """A real remoting client, closed after the test."""
    remoting = RemotingClient()
    yield remoting
    await remoting.close()
