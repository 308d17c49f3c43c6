"""The `ferrymq` entry point: every sub-command is there, and one imports only what it needs."""

from __future__ import annotations

import subprocess
import sys

import click

from ferrymq.cli.main import COMMANDS, main


def test_every_sub_command_loads_and_is_listed():
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        assert isinstance(main.get_command(ctx, name), click.Command), name
    assert main.get_command(ctx, "nonsense") is None


def test_an_admin_command_does_not_import_the_servers_libraries():
    script = (
        "import sys\n"
        "from ferrymq.cli.main import main\n"
        "try:\n"
        "    main(['admin', 'topicList', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('sqlalchemy', 'grpc', 'aiohttp', 'pyspark', 'ferrymq.amqp.gateway',\n"
        "         'ferrymq.proxy.server')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
