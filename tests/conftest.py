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


# `./run test` runs the suite on several pytest-xdist workers (`-n`); a directory whose tests share a
# costly session fixture runs on one worker, so that it is started once rather than once per worker.
SHARED_DIRECTORIES = ("tests/spark/",)  # one SparkSession, one standalone cluster and one broker


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist load` (the default with `-n`), except that a shared directory's tests are one unit."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedDirectoryScheduling(LoadScopeScheduling):
        """Each test is a unit of its own, but the tests of a shared directory are one (scheduled
        first: units go out largest first)."""

        def _split_scope(self, nodeid: str) -> str:
            return next((shared for shared in SHARED_DIRECTORIES if nodeid.startswith(shared)), nodeid)

    return SharedDirectoryScheduling(config, log)
