"""Which driver REST URLs the daemon opens (issue 32). The URL is read from Redis (the driver record
an agent registers, protocol/keys.py `driver_key`), which any Redis client can write: opened as it
is, `file:///etc/passwd` made the daemon read a local file and any http URL made it a request
forger. So a URL is opened only if it is http(s), names a port and no user, and its host is one
the config vouches for (`spark.driver_hosts_allowed`; unset: the hosts the config names for
drivers, the master and workers) or the app's agent registered in its ZooKeeper znode
(protocol/znodes.py `agent_path`, which only that agent writes once ACLs are on).
"""

from __future__ import annotations

import ipaddress
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Collection, Iterable
from http.client import HTTPMessage
from typing import IO

from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from sparkscale.config import Config
from sparkscale.config.connections import is_loopback
from sparkscale.protocol.znodes import agent_path
from sparkscale.store.bad_records import PROBLEMS, load_json
from sparkscale.zkconn import client as zk_client

ALLOWED_SCHEMES = ("http", "https")
MAX_URL_CHARS = 2048
AGENT_HOSTS_TTL_S = 30.0  # how long the hosts read from an agent's znode are trusted without a new read
MAX_AGENT_RECORD_BYTES = 64 * 1024


def url_refusal(url: object, hosts: Collection[str]) -> str | None:
    """Why the driver REST URL `url` must not be opened, or None: it must be http(s) with no
    userinfo, an explicit port, no query or fragment, and a host in `hosts` (compared lower-case)."""
    if not isinstance(url, str):
        return "not a string"
    problem = _text_refusal(url) or _form_refusal(url)
    if problem is not None:
        return problem
    host = _host(url)
    vouched = {h.lower() for h in hosts}
    # Loopback is this host under any name (a driver on a loopback address may register `localhost`): one
    # loopback host vouched for vouches for them all, and none does when the config names none.
    if host in vouched or (is_loopback(host) and any(is_loopback(h) for h in vouched)):
        return None
    return f"host {host} is not one the config or the app's agent vouches for"



def _form_refusal(url: str) -> str | None:
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme.lower() not in ALLOWED_SCHEMES:
        return f"scheme {parts.scheme or '(none)'!r} is not http or https"
    if "@" in parts.netloc:
        return "names a user (userinfo)"
    if port is None:
        return "names no port"
    if parts.query or parts.fragment:
        return "has a query or fragment"
    return None if parts.hostname else "names no host"


def _text_refusal(url: str) -> str | None:
    if len(url) > MAX_URL_CHARS:
        return f"longer than {MAX_URL_CHARS} characters"
    if any(not ch.isprintable() or ch.isspace() for ch in url):
        return "holds a control or space character"
    return None


def configured_hosts(cfg: Config) -> frozenset[str]:
    """The driver hosts the config vouches for: `spark.driver_hosts_allowed` when set; else the hosts
    it names for drivers (spark.driver_host, driver_bind_address), the master and the workers."""
    if cfg.spark.driver_hosts_allowed is not None:
        return frozenset(cfg.spark.driver_hosts_allowed)
    named = [cfg.spark.driver_host, cfg.spark.driver_bind_address, cfg.spark.master_host,
             *(cfg.cluster.worker_host(n) for n in range(1, cfg.cluster.workers + 1))]
    return frozenset(h for h in named if h and not _unspecified(h))


def _unspecified(host: str) -> bool:
    """0.0.0.0 or :: (bind to all): an address to bind, never one a driver is reached at."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def agent_hosts(data: bytes | None) -> frozenset[str]:
    """The hosts an agent's znode record names (its `driver_host` and its `ui_url`'s host); none
    for a record that does not parse (never raises)."""
    if not data or len(data) > MAX_AGENT_RECORD_BYTES:
        return frozenset()
    try:
        record = load_json(data)
    except PROBLEMS:
        return frozenset()
    if not isinstance(record, dict):
        return frozenset()
    return frozenset(h.lower() for h in _hosts_in(record.get("driver_host"), record.get("ui_url")) if h)


def _hosts_in(driver_host: object, ui_url: object) -> Iterable[str]:
    if isinstance(driver_host, str) and driver_host.isprintable() and len(driver_host) <= 255:
        yield driver_host
    if isinstance(ui_url, str) and len(ui_url) <= MAX_URL_CHARS:
        try:
            host = urllib.parse.urlsplit(ui_url).hostname
        except ValueError:
            return
        if host and host.isprintable():
            yield host


class AgentHosts:
    """The hosts apps' agents registered in ZooKeeper, read with a short-lived client (the REST
    client is built per cycle, without the daemon's session) and kept `AGENT_HOSTS_TTL_S`."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str, str], tuple[float, frozenset[str]]] = {}
        self._lock = threading.Lock()

    def of(self, cfg: Config, app: str) -> frozenset[str]:
        key = (cfg.zookeeper.hosts, cfg.zookeeper.root, app)
        with self._lock:
            known = self._known.get(key)
        if known is not None and time.monotonic() < known[0]:
            return known[1]
        hosts = agent_hosts(read_agent_record(cfg, app))
        with self._lock:
            self._known[key] = (time.monotonic() + AGENT_HOSTS_TTL_S, hosts)
        return hosts


def read_agent_record(cfg: Config, app: str) -> bytes | None:
    """The app's agent znode's data; None when it is absent or ZooKeeper does not answer."""
    zk = zk_client(cfg.zookeeper)
    try:
        zk.start(timeout=cfg.spark.rest_timeout_s)  # as long as a driver may take to answer
        data, _stat = zk.get(agent_path(cfg.zookeeper.root, app))
        return bytes(data)
    except (NoNodeError, KazooException, KazooTimeoutError, OSError):
        return None
    finally:
        zk.stop()
        zk.close()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as the HTTP error it is, never followed: a driver URL is checked
    before it is opened (`driver_url_refusal`), a redirect's target would not be."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: HTTPMessage, newurl: str) -> None:
        return None


# http(s) only (no file:, ftp: or data: handler), redirects refused; proxies as urlopen's.
OPENER = urllib.request.OpenerDirector()
for _handler in (urllib.request.ProxyHandler(), urllib.request.HTTPHandler(), urllib.request.HTTPSHandler(),
                 urllib.request.HTTPDefaultErrorHandler(), urllib.request.HTTPErrorProcessor(), _NoRedirect(),
                 urllib.request.UnknownHandler()):
    OPENER.add_handler(_handler)


AGENTS = AgentHosts()  # the process's cache of agent-registered hosts


def driver_url_refusal(cfg: Config, app: str, url: object) -> str | None:
    """Why `app`'s driver URL must not be opened, or None (`url_refusal` over the vouched hosts; the
    agent's znode is read only when the config does not already vouch for the URL's host)."""
    configured = configured_hosts(cfg)
    refusal = url_refusal(url, configured)
    if refusal is None or cfg.spark.driver_hosts_allowed is not None or url_refusal(url, {_host(url)}) is not None:
        return refusal
    return url_refusal(url, configured | AGENTS.of(cfg, app))


def _host(url: object) -> str:
    """The URL's host, lower-case; "" when it has none or does not parse."""
    try:
        return (urllib.parse.urlsplit(str(url)).hostname or "").lower()
    except ValueError:
        return ""
