"""The TLS options server and client commands share, named after the settings they set."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ferrymq.net.tls import CLIENT_AUTH, TLS_MODES, ClientTLS, ServerTLS, TLSConfigError, TLSSettings

T = TypeVar("T")

_FILE = click.Path(dir_okay=False, exists=True)

_SERVER_OPTIONS = (
    click.option("--tls-server-mode", type=click.Choice(TLS_MODES),
                 help="TLS on the listening port(s): plaintext only, both, or TLS only [default: disabled]."),
    click.option("--tls-server-cert-path", type=_FILE, help="PEM certificate (chain) to present."),
    click.option("--tls-server-key-path", type=_FILE, help="PEM private key of that certificate."),
    click.option("--tls-server-trust-cert-path", type=_FILE, help="PEM CA bundle for client certificates."),
    click.option("--tls-server-need-client-auth", type=click.Choice(CLIENT_AUTH),
                 help="Ask clients for a certificate [default: none]."),
)  # fmt: skip
_CLIENT_OPTIONS = (
    click.option("--tls", "tls_enable", is_flag=True, default=None, help="Connect to servers over TLS."),
    click.option("--tls-ca", "tls_client_trust_cert_path", type=_FILE,
                 help="PEM CA bundle to check servers by (with --tls) [default: the system's]."),
)  # fmt: skip


plaintext_port_option = click.option(
    "--plaintext-port", type=click.IntRange(0, 65535),
    help="With --tls-server-mode permissive: the port that serves gRPC without TLS (gRPC cannot serve "
    "both on one port; 0: any free port).",
)  # fmt: skip


def proxy_server(
    make: Callable[..., T], *args: Any, tls: ServerTLS | None, plaintext_port: int | None, **more: Any
) -> T:
    """``make(*args, tls=..., plaintext_port=..., **more)`` (a gRPC proxy), its TLS mistakes as CLI
    errors."""
    if plaintext_port is not None and (tls is None or not tls.permissive):
        raise click.UsageError("--plaintext-port goes with --tls-server-mode permissive")
    try:
        return make(*args, tls=tls, plaintext_port=plaintext_port, **more)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def server_tls_options(command: Callable) -> Callable:
    for option in reversed(_SERVER_OPTIONS):
        command = option(command)
    return command


def client_tls_options(command: Callable) -> Callable:
    for option in reversed(_CLIENT_OPTIONS):
        command = option(command)
    return command


def tls_overrides(options: dict[str, Any]) -> dict[str, Any]:
    """Take the TLS options out of a command's ``options``; those given, by setting name."""
    names = [name for name in options if name.startswith("tls_")]
    return {name: value for name in names if (value := options.pop(name)) is not None}


def tls_settings(options: dict[str, Any]) -> TLSSettings:
    """The TLS options of a command whose role has no config object of its own, checked now."""
    settings = TLSSettings(**tls_overrides(options))
    check_tls(settings)
    return settings


def check_tls(settings: TLSSettings) -> None:
    """Load the certificates once now, so a bad file stops the command with one clear line."""
    try:
        settings.server_tls()
        if (client := settings.client_tls()) is not None:
            client.context()
    except TLSConfigError as exc:
        raise click.ClickException(str(exc)) from None


def client_tls(options: dict[str, Any]) -> ClientTLS | bool:
    """``tls=`` for the SDK from --tls/--tls-ca (a CA implies --tls)."""
    settings = tls_settings(options)
    if not settings.tls_enable and not settings.tls_client_trust_cert_path:
        return False
    return ClientTLS(trust_cert_path=settings.tls_client_trust_cert_path)
