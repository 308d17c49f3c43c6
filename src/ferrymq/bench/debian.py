"""Debian packages that tests and benchmarks need (prometheus, chromium): installed with apt-get
when missing, as root, with the package lists refreshed once if they are stale."""

from __future__ import annotations

import os
import shutil
import subprocess


class Unavailable(Exception):
    """A program is not installed and cannot be installed here."""


def apt(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CI": "true", "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(
        ["apt-get", "-o", "DPkg::Lock::Timeout=300", *args],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def installed(program: str, package: str) -> str:
    """The path of `program`, installing Debian's `package` first when it is missing."""
    found = shutil.which(program)
    if found:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Unavailable(f"{program} is not installed, and installing it needs root and apt-get")
    install = ("install", "-y", "--no-install-recommends", package)
    done = apt(*install)
    if done.returncode != 0:  # stale package lists: refresh once
        apt("update")
        done = apt(*install)
    assert done.returncode == 0, (  # apt-get at hand and failing is an error, not a missing tool
        f"apt-get install {package} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    )
    found = shutil.which(program)
    if found is None:
        raise Unavailable(f"the {package} package installed no {program} program")
    return found
