"""Shared by the rocketmq 0.4.4 (C++ 4.x client) scripts, which run in the client's own venv.

Each script prints one JSON object per line on stdout, errors as one clear line on stderr, and always
ends by itself: a watchdog ends the process if the C++ library hangs.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
from pathlib import Path

_print_lock = threading.Lock()
PROG = Path(sys.argv[0]).name


def emit(event: str, **fields: object) -> None:
    """One JSON line on stdout, flushed at once: the test reads the lines while the script runs."""
    line = json.dumps({"event": event, **fields}, ensure_ascii=False)
    with _print_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def fail(message: str, code: int = 1) -> None:
    """Report an error on stderr and end the process now."""
    sys.stdout.flush()
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()
    os._exit(code)


def finish(code: int = 0) -> None:
    """End the process without running the wrapper's finalizers.

    rocketmq.client's ``__del__`` methods shut the C++ objects down and destroy them once more at interpreter
    exit, from whatever thread the collector runs on; the scripts have shut down explicitly already.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def start_watchdog(seconds: float, what: str) -> None:
    """End the process with exit code 3 if it is still running after `seconds`."""

    def expire() -> None:
        fail(f"{what} did not finish within {seconds:.0f}s; gave up (client log: {client_log_dir()})", code=3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def client_log_dir() -> Path:
    """Where the C++ client writes its log (``<pid>_rocketmq-cpp.log.N``)."""
    return Path.home() / "logs" / "rocketmq-cpp"


def import_client():
    """``rocketmq.client`` and ``rocketmq.exceptions``, or a clear error when this is not the client venv."""
    try:
        import rocketmq.client
        import rocketmq.exceptions
    except ImportError as exc:
        fail(f"cannot import rocketmq.client ({exc}); run this script with the rocketmq==0.4.4 venv's python")
    return rocketmq.client, rocketmq.exceptions


def check_namesrv(addresses: str, timeout: float = 3.0) -> None:
    """Fail fast when no NameServer listens: the C++ client itself starts without one and says nothing."""
    errors = []
    for address in filter(None, addresses.split(";")):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return
        except (OSError, ValueError) as exc:
            errors.append(f"{address}: {exc}")
    fail(f"cannot reach the NameServer at {addresses!r} ({'; '.join(errors) or 'no address given'})")


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--namesrv", required=True, help="NameServer address(es), host:port[;host:port]")
    parser.add_argument("--topic", required=True)
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds before the script stops by itself (default 60)"
    )
    parser.add_argument("--access-key", help="sign requests (ACL session credentials) as this user")
    parser.add_argument("--secret-key", help="the user's secret key")
    return parser


def use_credentials(client_object, args) -> None:
    """set_session_credentials when --access-key is given (channel as the C++ client's default)."""
    if args.access_key:
        client_object.set_session_credentials(args.access_key, args.secret_key or "", "ALIYUN")


def text(value: bytes | str | None) -> str | None:
    """The wrapper returns C strings as bytes; JSON wants text."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return value
