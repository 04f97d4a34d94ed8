"""What every benchmark does around its measurements: an isolated embedded environment for a set of
apps (fresh temp dir, free ports), and the results written as a markdown table plus JSON."""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from sparkscale.config import Config, load_config
from sparkscale.localenv import LocalEnvironment
from sparkscale.localenv.ports import isolated_overrides
from sparkscale.monitors.collector import read_progress
from sparkscale.store.redis_queries import read_queries


@dataclass(frozen=True)
class BenchEnv:
    cfg: Config
    config_path: str
    overrides: list[str]


@contextmanager
def embedded_environment(prefix: str, apps_yaml: str, extra_yaml: str = "") -> Iterator[BenchEnv]:
    """An embedded environment on free ports in a fresh temp dir, running the given `apps:` items;
    `extra_yaml` adds top-level config sections (loop, policy, ...)."""
    run_dir = Path(tempfile.mkdtemp(prefix=prefix))
    config_path = run_dir / "bench.yaml"
    config_path.write_text("apps:" + apps_yaml + "logging:\n  level: warning\n" + extra_yaml)
    overrides = isolated_overrides(run_dir / "env")
    cfg = load_config(config_path, overrides)
    env = LocalEnvironment(cfg)
    env.up()
    try:
        yield BenchEnv(cfg, str(config_path), overrides)
    finally:
        env.down()


def write_results(out: str, table: str, payload: dict[str, Any]) -> None:
    """OUT.json (the payload, which names its `command`) and OUT.md (the table and the command)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".json").write_text(json.dumps(payload, indent=2))
    path.with_suffix(".md").write_text(f"{table}\n\nCommand: `{payload['command']}`\n")


def wait_for(condition: Callable[[], object], timeout_s: float, what: str, poll_s: float = 0.5) -> None:
    """Poll `condition` until it holds; TimeoutError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(poll_s)  # polling the condition (Redis, REST, a log): there is nothing to wait on


def queries_ran(client: redis.Redis, cfg: Config, app_name: str, batches: int) -> bool:
    """Whether every query the app's agent lists has run `batches` batches with input (its progress
    stream): past a cold query's first batches, which pay for its start."""
    prefix = cfg.redis.key_prefix
    queries = read_queries(client, prefix, app_name)
    return bool(queries) and all(
        sum(1 for r in read_progress(client, prefix, app_name, name) if r.num_input_rows > 0) >= batches
        for name in queries)
