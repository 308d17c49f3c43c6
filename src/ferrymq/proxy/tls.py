"""gRPC server credentials from our TLS settings, with certificates rotated without a restart.

gRPC asks ``certificate_configuration_fetcher`` before every new handshake; it answers with a new
configuration only when the files changed and load (``ServerTLS.changed``), so a half-written file
keeps the last good certificate as for the other listeners. gRPC cannot tell TLS from plaintext on
one port, so RocketMQ's permissive mode is a TLS port plus a plaintext port of its own.
"""

from __future__ import annotations

import grpc

from ferrymq.net.tls import ServerTLS


def server_credentials(tls: ServerTLS) -> grpc.ServerCredentials:
    def configuration() -> grpc.ServerCertificateConfiguration:
        chain, key, trust = tls.read_files()
        return grpc.ssl_server_certificate_configuration([(key, chain)], root_certificates=trust)

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        return configuration() if tls.changed() else None

    return grpc.dynamic_ssl_server_credentials(
        configuration(), fetch, require_client_authentication=tls.client_auth == "require"
    )
