"""Instructions per remoting encode and decode, C codec against the Python reference, by callgrind.

Each operation runs N times in a process under `valgrind --tool=callgrind`, and again 0 times; the
difference over N is its cost in instructions, which does not depend on the machine's load. The
frames are a single send's: a SEND_MESSAGE_V2 request (11 ext fields, 1 KiB body) and its answer.

    .venv/bin/python bench/codec_instructions.py [--runs 2000] [--save FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

OPERATIONS = ("encode request", "decode request", "encode response", "decode response")

WORKLOAD = """
import sys
from ferrymq.protocol.remoting import FrameDecoder, RemotingCommand
ext = {"a": "ferrymq-bench", "b": "ProfilePath", "c": "TBW102", "d": "4", "e": "3", "f": "0",
       "g": "1764370000000", "h": "0", "i": "UNIQ_KEY\\x017F0000010A0B18B4AAC2B5D8E7F90001\\x02",
       "j": "0", "k": "false"}
request = RemotingCommand(310, opaque=7, ext_fields=ext, body=b"x" * 1024)
response = request.make_response(0, ext_fields={"msgId": "7F00000100002A9F0000000000012345",
    "queueId": "3", "queueOffset": "123456", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
frames = {"request": request.encode(), "response": response.encode()}
decoder = FrameDecoder()
operation, runs = sys.argv[1], int(sys.argv[2])
verb, which = operation.split()
command, frame = (request if which == "request" else response), frames[which]
for _ in range(runs):
    command.encode_parts() if verb == "encode" else decoder.feed(frame)
"""


def callgrind_instructions(argv: list[str], env: dict[str, str], work: Path) -> int:
    """The instructions a Python process (this interpreter with `argv`) ran, by callgrind."""
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work / 'callgrind.out'}", sys.executable,
         *argv],
        env=env, capture_output=True, text=True, check=True, timeout=1800,
    )  # fmt: skip
    match = re.search(r"Collected : (\d+)", result.stderr)
    if match is None:
        raise RuntimeError(f"no instruction count in callgrind's output:\n{result.stderr[-2000:]}")
    return int(match.group(1))


def instructions(operation: str, runs: int, pure: bool, work: Path) -> int:
    env = {**os.environ, "FERRYMQ_PURE_PYTHON": "1" if pure else ""}
    return callgrind_instructions(["-c", WORKLOAD, operation, str(runs)], env, work)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--save")
    args = parser.parse_args()
    report: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory() as work:
        for pure in (False, True):
            codec = "python" if pure else "c"
            base = instructions(OPERATIONS[0], 0, pure, Path(work))
            for operation in OPERATIONS:
                total = instructions(operation, args.runs, pure, Path(work))
                report.setdefault(operation, {})[codec] = round((total - base) / args.runs)
                print(operation, codec, report[operation][codec], file=sys.stderr)
    print(json.dumps(report, indent=1))
    if args.save:
        Path(args.save).write_text(json.dumps({"runs": args.runs, "instructions_per_call": report}, indent=1))


if __name__ == "__main__":
    main()
