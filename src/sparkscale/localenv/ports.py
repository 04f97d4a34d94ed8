"""Free loopback ports, and config overrides that put a whole embedded environment on them.

Tests and benchmarks use these so that they never touch a developer's running environment (default
ports, ~/.sparkscale) and can run side by side.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LISTEN_FLOOR = 20000  # below the kernel's ephemeral range, above the usual service ports
OFFSETS = 16  # room for the ports counted on from one (worker N, app N), kept below the range too


def free_port() -> int:
    """A port free for a listener, below the kernel's ephemeral range where one can be found: a port
    the OS hands out for outgoing connections could be taken by one (Spark opens many) between this
    check and the listener's start, and a driver started on a taken UI port fails."""
    ceiling = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(LISTEN_FLOOR, ceiling - OFFSETS) if ceiling > LISTEN_FLOOR + 1000 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            bound: int = sock.getsockname()[1]
            return bound
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        any_port: int = sock.getsockname()[1]
        return any_port


def _ephemeral_low() -> int:
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def isolated_overrides(run_dir: Path) -> list[str]:
    """`--set` overrides for an embedded environment on fresh ports under `run_dir`."""
    worker_web = free_port()
    while not port_free(worker_web + 1):  # worker N uses worker_web_port + N - 1
        worker_web = free_port()
    taken = {worker_web, worker_web + 1}

    def another() -> int:
        """A free port none of the others took (each is only checked free, not held, until used)."""
        port = free_port()
        while port in taken:
            port = free_port()
        taken.add(port)
        return port

    return [
        f"cluster.run_dir={run_dir}",
        f"spark.master_url=spark://127.0.0.1:{another()}",
        f"spark.master_web_url=http://127.0.0.1:{another()}",
        f"cluster.worker_web_port={worker_web}",
        f"redis.port={another()}",
        f"zookeeper.hosts=127.0.0.1:{another()}",
        # Drivers take any free UI port and their agents publish it; they listen on loopback here.
        "spark.driver_host=127.0.0.1",
        "spark.driver_bind_address=127.0.0.1",
    ]
