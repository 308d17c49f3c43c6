"""Runs one scenario with pika (BlockingConnection) in pika's own venv and prints one JSON line with
what the client saw. Usage: pika_scenarios.py SCENARIO HOST PORT [CA_FILE] (a CA file: over TLS)."""

from __future__ import annotations

import json
import ssl
import sys
import time

import pika
from pika.exceptions import AMQPError, ChannelClosedByBroker

scenario, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])


def params(**options) -> pika.ConnectionParameters:
    options.setdefault("credentials", pika.PlainCredentials("guest", "guest"))
    if len(sys.argv) > 4:  # AMQPS, trusting that CA only
        context = ssl.create_default_context(cafile=sys.argv[4])
        options.setdefault("ssl_options", pika.SSLOptions(context, server_hostname=host))
    return pika.ConnectionParameters(host, port, connection_attempts=1, socket_timeout=10, **options)


def error(e: Exception) -> dict:
    return {"error": type(e).__name__, "message": str(e)}


def session() -> dict:
    """Negotiated values (server's heartbeat, then a lower one asked for), channels opened and closed."""
    default = pika.BlockingConnection(params())
    offered = default._impl.params.heartbeat
    default.close()
    connection = pika.BlockingConnection(params(heartbeat=7))
    channels = [connection.channel() for _ in range(3)]
    channels[1].close()
    again = connection.channel()
    numbers = [c.channel_number for c in channels] + [again.channel_number]
    opened = [c.is_open for c in channels] + [again.is_open]
    connection.close()
    return {
        "heartbeat_default": offered,
        "heartbeat_asked": connection._impl.params.heartbeat,
        "frame_max": connection._impl.params.frame_max,
        "channels": numbers,
        "open": opened,
        "closed": connection.is_closed,
    }


def wrong_password() -> dict:
    try:
        pika.BlockingConnection(params(credentials=pika.PlainCredentials("guest", "wrong")))
    except AMQPError as e:
        return error(e)
    return {"error": None}


def absent_vhost() -> dict:
    try:
        pika.BlockingConnection(params(virtual_host="ferrymq-compat-absent"))
    except AMQPError as e:
        return error(e)
    return {"error": None}


def passive_declare() -> dict:
    """A passive declare of an absent queue: a channel error, and the connection lives on."""
    connection = pika.BlockingConnection(params())
    channel = connection.channel()
    result: dict = {}
    try:
        channel.queue_declare("ferrymq-compat-absent-queue", passive=True)
    except ChannelClosedByBroker as e:
        result = {"error": type(e).__name__, "code": e.reply_code, "text": e.reply_text}
    result["channel_open"] = channel.is_open
    result["connection_open"] = connection.is_open
    result["next_channel_open"] = connection.channel().is_open
    connection.close()
    return result


def heartbeats() -> dict:
    """Heartbeat 1 s and nothing else for 4 s: only heartbeats both ways keep the connection up."""
    connection = pika.BlockingConnection(params(heartbeat=1))
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        connection.process_data_events(time_limit=0.5)
    result = {"open": connection.is_open}
    connection.close()
    return result


def round_trip() -> dict:
    """Publish one message to a new queue and get it back; what the connection was (TLS or not)."""
    try:
        connection = pika.BlockingConnection(params())
    except (AMQPError, OSError) as e:  # a failed TLS handshake is an ssl.SSLError
        return error(e)
    channel = connection.channel()
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.basic_publish("", queue, b"sealed")
    body = None
    for _ in range(50):  # a get is not a wait: ask again for at most 5 s
        _, _, body = channel.basic_get(queue, auto_ack=True)
        if body is not None:
            break
        time.sleep(0.1)
    sock = connection._impl._transport._sock
    result = {"body": body.decode() if body else None, "tls": getattr(sock, "version", lambda: None)()}
    connection.close()
    return result


SCENARIOS = {
    "round_trip": round_trip,
    "session": session,
    "wrong_password": wrong_password,
    "absent_vhost": absent_vhost,
    "passive_declare": passive_declare,
    "heartbeats": heartbeats,
}
print(json.dumps(SCENARIOS[scenario]()), flush=True)
