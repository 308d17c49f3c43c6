"""Prometheus metrics and health endpoints of every role.

Servers keep plain-int counters where messages pass (``Tally``, ``net.latency``); the collectors here
read those counters and the servers' state only when Prometheus scrapes, so the hot path never calls
prometheus-client. A role plugs in by adding its collector and readiness check to a ``Registry``
(``registry.py``) and serving it (``http.py``); ``roles.py`` does that for the roles that exist.
"""
