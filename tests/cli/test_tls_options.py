"""TLS options that cannot work stop a command at once with one clear line (nothing is started)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from ferrymq.cli.main import main
from tests.pki import pki  # noqa: F401  (fixture)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["namesrv", "--listen", "127.0.0.1:0", "--tls-server-mode", "enforcing"],
         "tls_server_mode enforcing needs tls_server_cert_path and tls_server_key_path"),
        (["amqp", "--namesrv", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--tls-port", "0"],
         "--tls-port needs --tls-server-mode"),
        (["namesrv", "--tls-server-mode", "strict"], "'strict' is not one of"),
    ],
)  # fmt: skip
def test_impossible_tls_options_are_refused(argv, says):
    result = CliRunner().invoke(main, argv)
    assert result.exit_code != 0 and says in result.output, result.output


def proxy_argv(mode: str, cert, key) -> list[str]:
    return ["proxy", "--listen", "127.0.0.1:0", "--tls-server-mode", mode,
            "--tls-server-cert-path", str(cert), "--tls-server-key-path", str(key)]  # fmt: skip


def test_a_key_that_does_not_match_its_certificate(pki):  # noqa: F811
    argv = proxy_argv("enforcing", pki.server.cert, pki.client.key)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code != 0 and "cannot load" in result.output, result.output


def test_a_permissive_grpc_proxy_needs_its_plaintext_port(pki):  # noqa: F811
    argv = proxy_argv("permissive", pki.server.cert, pki.server.key)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code != 0 and "needs a plaintext port" in result.output, result.output
