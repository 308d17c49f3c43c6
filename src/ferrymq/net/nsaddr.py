"""The NameServer address service (RocketMQ's TopAddressing): an HTTP endpoint whose body is the
NameServer list, "host:port;host:port". Clients and brokers that use it fetch the list at start and
poll it (RocketMQ: every 2 minutes), so NameServers can be added, moved or removed without
reconfiguring or restarting anyone. A failed fetch or an empty answer keeps the list in use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

DEFAULT_DOMAIN = "jmenv.tbsite.net"  # RocketMQ's rocketmq.namesrv.domain
DEFAULT_SUBGROUP = "nsaddr"  # RocketMQ's rocketmq.namesrv.domain.subgroup
DEFAULT_POLL_INTERVAL = 120.0  # seconds, as RocketMQ polls


class AddressServiceError(Exception):
    """The address service did not answer with a NameServer list."""


def ws_addr(domain: str = DEFAULT_DOMAIN, subgroup: str = DEFAULT_SUBGROUP) -> str:
    """The service's URL as RocketMQ builds it: port 8080 unless the domain names a port."""
    host = domain if ":" in domain else f"{domain}:8080"
    return f"http://{host}/rocketmq/{subgroup}"


def split_addrs(text: str | None) -> list[str]:
    """ "host:port;host:port" (blanks and line breaks ignored) as a list."""
    return [a.strip() for a in (text or "").split(";") if a.strip()]


async def fetch_namesrv_addrs(url: str, timeout: float = 3.0) -> list[str]:
    """The list the service at `url` gives now."""
    import aiohttp  # only clients that use the service pay for importing it

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url) as response,
        ):
            body = await response.text()
            status = response.status
    except (aiohttp.ClientError, TimeoutError, UnicodeDecodeError) as e:
        raise AddressServiceError(f"address service {url}: {e or type(e).__name__}") from e
    if status != 200:
        raise AddressServiceError(f"address service {url} answered HTTP {status}")
    addrs = split_addrs(body)
    if not addrs:
        raise AddressServiceError(f"address service {url} answered no NameServer")
    return addrs


class NameServerAddressWatcher:
    """Keeps the NameServer list of one client or broker in step with the address service:
    `changed(addrs)` is called with every new list (the first fetch included)."""

    def __init__(self, url: str, changed: Callable[[list[str]], None], timeout: float = 3.0) -> None:
        self.url = url
        self.timeout = timeout
        self.addrs: list[str] = []
        self._changed = changed
        self._failing = False

    async def refresh(self) -> bool:
        """Fetch the list once; True if it changed. A failure is logged once and the list kept."""
        try:
            addrs = await fetch_namesrv_addrs(self.url, self.timeout)
        except AddressServiceError as e:
            if not self._failing:
                log.warning("%s (keeping %s)", e, ";".join(self.addrs) or "no NameServer")
            self._failing = True
            return False
        self._failing = False
        if addrs == self.addrs:
            return False
        log.info(
            "NameServers from %s: %s (were %s)", self.url, ";".join(addrs), ";".join(self.addrs) or "none"
        )
        self.addrs = addrs
        self._changed(list(addrs))
        return True
