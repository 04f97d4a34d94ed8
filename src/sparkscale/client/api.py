"""`Client`: one object per loaded config, whose methods are what an operator does to an app.

Every change goes the way the daemon would make it: with a daemon leading the app, as a request to
that leader (a znode it answers at its epoch, daemon/manual.py); with none, here, under the app's
leader lock and through the action log, so agents take it from the lock's live holder as usual.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sparkscale.client import migrations
from sparkscale.client.errors import BadRequest, Unavailable
from sparkscale.client.outcomes import MigrationOutcome, Note, ScaleOutcome, Submitted, silent
from sparkscale.config import Config

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from sparkscale.daemon.leader import LeaderElection


class Client:
    def __init__(self, cfg: Config, config_path: str | None = None, overrides: tuple[str, ...] | list[str] = (),
                 by: str | None = None):
        """`config_path` and `overrides` are handed on to the processes a change starts (a driver
        restarted in a new executor shape); `by` names this client in the action log and journal."""
        self.cfg = cfg
        self.config_path = config_path
        self.overrides = list(overrides)
        self.by = by or f"cli:{socket.gethostname()}:{os.getpid()}"

    # -- lookups ----------------------------------------------------------------------------------

    def with_app(self, app_name: str) -> Config:
        """The config with `app_name` in it (a bare pipeline name gets a default app)."""
        from sparkscale.apps.workloads import registered_workloads

        try:
            return self.cfg.with_app(app_name)
        except KeyError as exc:
            raise BadRequest(f"{exc.args[0]}; a pipeline name ({', '.join(registered_workloads())}) also works") \
                from None

    def for_app(self, app_name: str) -> Client:
        """This client on the config with `app_name` in it (`with_app`)."""
        return Client(self.with_app(app_name), self.config_path, self.overrides, self.by)

    @contextmanager
    def zookeeper(self) -> Iterator[KazooClient]:
        from kazoo.handlers.threading import KazooTimeoutError

        from sparkscale import zkconn

        zk = zkconn.client(self.cfg.zookeeper)
        try:
            zk.start(timeout=10)
        except KazooTimeoutError:
            raise Unavailable(f"ZooKeeper at {self.cfg.zookeeper.hosts} is unreachable") from None
        try:
            yield zk
        finally:
            zk.stop()

    @contextmanager
    def leader_lock(self, zk: KazooClient, app_name: str, timeout_s: float = 10.0) -> Iterator[LeaderElection]:
        """The app's leader lock, for acting without a daemon; Unavailable if another holds it."""
        from sparkscale.daemon.leader import LeaderElection

        election = LeaderElection(zk, self.cfg.zookeeper.root, app_name, self.by)
        if not election.acquire(timeout_s=timeout_s):
            raise Unavailable(f"could not take the leader lock of {app_name} within {timeout_s:g} s")
        try:
            yield election
        finally:
            election.release()

    def leader(self, zk: KazooClient, app_name: str) -> str | None:
        from sparkscale.daemon.leader import current_leader

        return current_leader(zk, self.cfg.zookeeper.root, app_name)

    # -- lifecycle --------------------------------------------------------------------------------

    def submit(self, app_name: str, wait_s: float) -> Submitted:
        """Submit the app (its script or pipeline) and wait until its queries run."""
        from sparkscale.apps.submit import PipelineError, submit
        from sparkscale.apps.driver_record import current_driver
        from sparkscale.monitors.spark_rest import SparkRestError, driver_rest

        cfg = self.with_app(app_name)
        try:
            record = submit(cfg, app_name, self.config_path, self.overrides, wait_s=wait_s)
        except PipelineError as exc:
            raise Unavailable(f"cannot submit {app_name}: {exc}") from None
        try:  # where the driver's agent says its REST API is (any port, the driver's host)
            rest = driver_rest(cfg, cfg.app(app_name)).base_url
        except SparkRestError as exc:
            rest = f"unknown ({exc.cause})"
        driver = current_driver(cfg, app_name)
        return Submitted(record, driver.pid if driver else None, rest)

    def stop(self, app_name: str) -> bool:
        """Stop the app's driver (and its executors); False if it was not running."""
        from sparkscale.apps.submit import stop

        return stop(self.with_app(app_name), app_name)

    # -- executors --------------------------------------------------------------------------------

    def scale_executors(self, app_name: str, to: int, timeout_s: float, note: Note = silent) -> ScaleOutcome:
        """Set the app's executor count: through its leader, else under its lock here."""
        from sparkscale.actuators.base import ActuationContext
        from sparkscale.actuators.executors import active_executor_ids
        from sparkscale.daemon import manual
        from sparkscale.daemon.action_log import ActionLog
        from sparkscale.monitors.spark_rest import SparkRestError
        from sparkscale.redisconn import connect

        cfg = self.with_app(app_name)
        app = cfg.app(app_name)
        root = cfg.zookeeper.root
        with self.zookeeper() as zk:
            leader = self.leader(zk, app_name)
            if leader is not None:
                note(f"{app_name} is led by {leader}: asking it to scale to {to} executors")
                name = manual.submit_request(zk, root, app_name, to, self.by, timeout_s)
                answer = manual.wait_result(zk, root, app_name, name, timeout_s)
                if answer is None:
                    raise Unavailable(f"no answer within {timeout_s:g} s; the request was withdrawn")
                return ScaleOutcome(answer.ok, "done" if answer.ok else "not done", answer.detail,
                                    answer.decision_id, answer.leader, None)
            with self.leader_lock(zk, app_name) as election:
                redis_client = connect(cfg.redis)
                ctx = ActuationContext(cfg, app, zk, redis_client, election.epoch or 0, lambda: election.is_leader,
                                       self.by)
                try:
                    current = len(active_executor_ids(ctx.rest, app_name))
                except SparkRestError as exc:
                    raise Unavailable(f"{app_name} does not answer on its Spark REST API: {exc}") from None
                # The same dispatch as the daemon's: logged, carried out, its result logged.
                decision_id, result = manual.carry_out(
                    ActionLog(redis_client, cfg.redis.key_prefix, cfg.action_log), ctx, to, self.by,
                    current=current, snapshot_id="", at=time.time())
                return ScaleOutcome(result.status == "done", result.status, result.detail, decision_id, None,
                                    election.epoch)

    # -- migrations (client/migrations.py) ---------------------------------------------------------

    def migrate(self, request: migrations.MigrationRequest, timeout_s: float,
                on_journal: migrations.OnJournal = migrations.ignore, note: Note = silent) -> MigrationOutcome:
        """A new migration of a query's state partitions and/or the executors' shape; each journal
        write is handed to `on_journal` as it happens."""
        return migrations.start(self, request, timeout_s, on_journal, note)

    def operate_migration(self, app_name: str | None, migration_id: str, abort: bool, timeout_s: float,
                          on_journal: migrations.OnJournal = migrations.ignore, note: Note = silent) \
            -> MigrationOutcome:
        """`--resume ID` / `--abort ID` of a journaled migration (of `app_name`, or of any app)."""
        return migrations.operate(self, app_name, migration_id, abort, timeout_s, on_journal, note)

    def open_migrations(self, app_name: str | None) -> list[migrations.OpenMigration]:
        """Each app's journaled migration that is not done, or done with follow-up figures."""
        return migrations.open_journals(self, app_name)
