"""The broker's whole per-send path without the kernel: frames in, answers out, in one process.

A real Broker (ASYNC_FLUSH) gets a connection of its remoting server whose transport is a stub that
keeps what is written; SEND_MESSAGE_V2 frames as the SDK encodes them are fed to it --inflight at a
time, and the loop runs until every answer is written. So it covers what `put_path.py` does not: the
frame codec, the connection's read callback and handler start, the dispatcher, the answer's encoding
and the write, but neither socket calls nor another process's noise.

    PYTHONPATH=<tree>/src .venv/bin/python bench/server_send.py [--sends 20000] [--rounds 3]
    PYTHONPATH=<tree>/src .venv/bin/python bench/server_send.py --instructions [--sends 4000]

It prints the loop thread's CPU per send (best of --rounds); with --instructions it runs itself under
callgrind with --sends sends and with none, and prints user-space instructions per send (a figure
the machine's load does not move; run it niced).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from codec_instructions import callgrind_instructions
from ferrymq.bench.machine import machine_info
from ferrymq.net import install_uvloop
from put_path import request, running_broker


class Transport:
    """The little of asyncio.Transport a server connection uses; it counts the answers' bytes."""

    def __init__(self, lost) -> None:
        self.written = 0
        self._lost = lost  # the connection's connection_lost

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 40000) if name == "peername" else None

    def writelines(self, parts) -> None:
        self.written += sum(len(p) for p in parts)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self._lost(None)

    def abort(self) -> None:
        self._lost(None)


async def run(sends: int, rounds: int, inflight: int, root: Path) -> list[float]:
    async with running_broker(root) as broker:
        connection = broker.server._new_connection()
        transport = Transport(connection.connection_lost)
        connection.connection_made(transport)  # type: ignore[arg-type]
        body = os.urandom(1024)
        frames = []
        for i in range(max(sends, 1)):
            command = request(i % 4, body)
            command.opaque = i
            frames.append(command.encode())
        chunks = [b"".join(frames[i : i + inflight]) for i in range(0, sends, inflight)]
        per_send = []
        for _ in range(rounds):
            started = time.thread_time()
            for chunk in chunks:
                connection.data_received(chunk)
                await asyncio.sleep(0)  # the flusher's two passes
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            if sends:
                per_send.append((time.thread_time() - started) / sends * 1e6)
            await asyncio.sleep(0.05)  # the dispatcher's turn
        assert transport.written or not sends, "no answer was written"
        return per_send


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sends", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--instructions", action="store_true", help="callgrind: instructions per send")
    p.add_argument("--save", type=Path)
    args = p.parse_args()
    if args.instructions:
        with tempfile.TemporaryDirectory() as work:
            argv = [__file__, "--rounds", "1", "--inflight", str(args.inflight), "--sends"]
            env = dict(os.environ)
            counts = [callgrind_instructions([*argv, str(n)], env, Path(work)) for n in (args.sends, 0)]
        result: dict = {
            "sends": args.sends,
            "instructions_per_send": round((counts[0] - counts[1]) / args.sends),
        }
    else:
        install_uvloop()
        with tempfile.TemporaryDirectory() as tmp:
            per_send = asyncio.run(run(args.sends, args.rounds, args.inflight, Path(tmp)))
        result = {"sends": args.sends, "us_per_send_rounds": [round(x, 2) for x in per_send]}
        if per_send:
            result["us_per_send_best"] = round(min(per_send), 2)
    result["machine"] = machine_info()
    print(json.dumps(result))
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
