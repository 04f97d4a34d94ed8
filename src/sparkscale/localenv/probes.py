"""Whether a service of the embedded environment answers: ZooKeeper's `ruok`, a Redis PING (with
AUTH when configured), the master's status and its list of ALIVE workers, a port taken. Each is a
yes/no question asked again until a deadline (environment.py), so a failure is a "no"."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Callable
from typing import Any

from sparkscale.config import RedisConfig
from sparkscale.config.identities import Credentials
from sparkscale.redisconn import connect


def answered(check: Callable[[], bool]) -> bool:
    """The check's yes or no; an exception is a no."""
    try:
        return bool(check())
    except Exception:  # "does it answer" is a yes/no question
        return False


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def zookeeper_ruok(host: str, port: int) -> bool:
    with socket.create_connection((host, port), timeout=2) as sock:
        sock.sendall(b"ruok")
        return sock.recv(16) == b"imok"


def redis_ping(cfg: RedisConfig, host: str, identity: Credentials | None = None) -> bool:
    """PING as every client connects (AUTH when configured; as `identity` if given): a server that
    refuses it does not answer."""
    client = connect(cfg.model_copy(update={"host": host, "socket_timeout_s": 2.0}), decode_responses=False,
                     identity=identity)
    try:
        return bool(client.ping())
    finally:
        client.close()


def master_json(web_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{web_url}/json/", timeout=3) as resp:
        status: dict[str, Any] = json.load(resp)
    return status


def worker_alive(web_url: str, host: str, worker_web_port: int) -> bool:
    """The master lists an ALIVE worker registered from `host` (its --host) with this web UI port."""
    workers = master_json(web_url).get("workers", [])
    return any(
        w.get("state") == "ALIVE" and w.get("host") == host
        and str(w.get("webuiaddress", "")).endswith(f":{worker_web_port}")
        for w in workers
    )
