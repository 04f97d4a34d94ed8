"""Free loopback ports, and config overrides that put a whole embedded environment on them.

Tests and benchmarks use these so that they never touch a developer's running environment (default
ports, ~/.sparkscale) and can run side by side.
"""

from __future__ import annotations

import socket
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def isolated_overrides(run_dir: Path) -> list[str]:
    """`--set` overrides for an embedded environment on fresh ports under `run_dir`."""
    worker_web = free_port()
    while not port_free(worker_web + 1):  # worker N uses worker_web_port + N - 1
        worker_web = free_port()
    driver_ui = free_port()
    while not all(port_free(driver_ui + i) for i in range(1, 4)):  # app N uses driver_ui_port + N
        driver_ui = free_port()
    return [
        f"cluster.run_dir={run_dir}",
        f"spark.master_url=spark://127.0.0.1:{free_port()}",
        f"spark.master_web_url=http://127.0.0.1:{free_port()}",
        f"cluster.worker_web_port={worker_web}",
        f"redis.port={free_port()}",
        f"zookeeper.hosts=127.0.0.1:{free_port()}",
        f"spark.driver_ui_port={driver_ui}",
    ]
