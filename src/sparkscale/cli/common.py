"""What several command modules share: exit codes, --config/--set loading (exit 2 on a bad config),
the app lookup and the ZooKeeper connection that exit when they cannot be had."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from sparkscale.config import Config, ConfigError, load_config
from sparkscale.config.identities import OPERATOR, process_identity
from sparkscale.config.secrets import check_secrets
from sparkscale.logsetup import configure_logging

if TYPE_CHECKING:
    import redis
    from kazoo.client import KazooClient

    from sparkscale.client import Client
    from sparkscale.store.base import Store

EXIT_CONFIG = 2
EXIT_ENVIRONMENT = 3

CONFIG_ENV = "SPARKSCALE_CONFIG"


def config_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add --config/--set and hand the command a loaded, validated Config (exit 2 if it is not)."""

    @click.option(
        "--config", "config_path", type=click.Path(dir_okay=False), envvar=CONFIG_ENV, default=None,
        help=f"YAML config file (default: built-in defaults; env {CONFIG_ENV}).",
    )
    @click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a dotted config key.")
    @functools.wraps(func)
    def wrapper(config_path: str | None, overrides: tuple[str, ...], **kwargs: Any) -> Any:
        cfg = load_or_exit(config_path, overrides)
        # Commands that start other processes (a pipeline's driver) hand these on unchanged.
        click.get_current_context().meta.update(config_path=config_path, overrides=list(overrides))
        configure_logging(cfg.logging)
        return func(cfg, **kwargs)

    return wrapper


def load_or_exit(path: str | None, overrides: tuple[str, ...]) -> Config:
    try:
        cfg = load_config(path, overrides)
        # Files or the environment; once `cluster up` made security.identity_dir, this process's
        # identity's secret too (before, `cluster up` itself must run, and makes it).
        made = cfg.security.identity_dir is not None and Path(cfg.security.identity_dir).expanduser().is_dir()
        check_secrets(cfg, str(path) if path is not None else "<defaults>", process_identity() if made else None)
        return cfg
    except ConfigError as exc:
        exit_invalid("config", *exc.problems)


def exit_invalid(what: str, *problems: object) -> NoReturn:
    """Exit 2 for a bad input file or argument: one line per problem, each naming where it is
    (file, key or field path) and what is wrong (`invalid snapshot: s.json: window_s: ...`)."""
    for problem in problems:
        click.echo(f"invalid {what}: {problem}", err=True)
    sys.exit(EXIT_CONFIG)


def client(cfg: Config) -> Client:
    """The product's client API on this command's config (the CLI is a thin layer over it): what it
    starts gets the same --config and --set."""
    from sparkscale.client import Client

    meta = click.get_current_context().meta
    return Client(cfg, meta.get("config_path"), tuple(meta.get("overrides", ())))


@contextmanager
def client_errors() -> Iterator[None]:
    """A client error as the CLI says it: its message on stderr and its exit code (2: fix the request)."""
    from sparkscale.client import ClientError

    try:
        yield
    except ClientError as exc:
        click.echo(str(exc), err=True)
        sys.exit(exc.exit_code)


def require_app(cfg: Config, app_name: str) -> Config:
    """`cfg` with `app_name` in it (a bare pipeline name gets a default app); exit 2 if unknown
    (the client's lookup and message, `Connection.with_app`)."""
    from sparkscale.client import BadRequest
    from sparkscale.client.connection import Connection

    try:
        return Connection(cfg).with_app(app_name)
    except BadRequest as exc:
        click.echo(str(exc), err=True)
        sys.exit(exc.exit_code)


def cli_store(cfg: Config, zk: KazooClient | None = None, redis_client: redis.Redis | None = None) -> Store:
    """The state a read command shows (store/live.py). Without `zk`, a client that is never started:
    the commands that read only Redis (actions, explain, blocklist) do not reach ZooKeeper."""
    from sparkscale import zkconn
    from sparkscale.redisconn import connect_as
    from sparkscale.store.live import live_store

    return live_store(redis_client if redis_client is not None else connect_as(cfg, OPERATOR), cfg.redis.key_prefix,
                      zk if zk is not None else zkconn.client_as(cfg, OPERATOR), cfg.zookeeper.root, cfg.action_log)
