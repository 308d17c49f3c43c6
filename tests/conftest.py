"""Fixtures shared by every test package."""

import os

import pytest

from ferrymq.net import RemotingClient

# Brokers started by tests (in-process or as subprocesses, which inherit the environment) use small
# store files: the defaults reserve 1 GiB of CommitLog and 420 MB of index per broker, and a suite that
# starts dozens of brokers would fill the disk.
for _name, _value in {
    "FERRYMQ_MAPPED_FILE_SIZE_COMMIT_LOG": str(16 << 20),
    "FERRYMQ_MAX_HASH_SLOT_NUM": "50000",
    "FERRYMQ_MAX_INDEX_NUM": "200000",
}.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture
async def client():
    """A real remoting client, closed after the test."""
    remoting = RemotingClient()
    yield remoting
    await remoting.close()
