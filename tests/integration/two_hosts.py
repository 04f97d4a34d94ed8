"""An embedded environment of its own whose two workers bind and advertise 127.0.0.2 and 127.0.0.3
(master, Redis, ZooKeeper and the driver on 127.0.0.1): the tests about hosts share it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sparkscale.apps.submit import stop
from sparkscale.config import Config, load_config
from sparkscale.localenv import LocalEnvironment
from sparkscale.localenv.ports import isolated_overrides

WORKER_HOSTS = ("127.0.0.2", "127.0.0.3")


@contextmanager
def two_host_environment(work: Path, config_text: str, app: str) -> Iterator[tuple[Config, str, list[str]]]:
    """(config, its path, the overrides) of the running environment; `app` is stopped before the
    environment goes down."""
    path = work / "sparkscale.yaml"
    path.write_text(config_text)
    overrides = [*isolated_overrides(work / "env"), "cluster.workers=2",
                 f"cluster.worker_hosts=[{','.join(WORKER_HOSTS)}]", "logging.stderr_format=json"]
    cfg = load_config(path, overrides)
    env = LocalEnvironment(cfg)
    env.up()
    try:
        yield cfg, str(path), overrides
    finally:
        try:
            stop(cfg, app)
        finally:
            env.down()
