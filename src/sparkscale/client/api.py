"""`Client`: one object per loaded config, whose methods are what an operator does to an app.

Every change goes the way the daemon would make it: with a daemon leading the app, as a request to
that leader (a znode it answers at its epoch, daemon/manual.py); with none, here, under the app's
leader lock and through the action log, so agents take it from the lock's live holder as usual.
"""

from __future__ import annotations

import time

from sparkscale.client import migrations
from sparkscale.client.connection import Connection
from sparkscale.client.errors import Unavailable
from sparkscale.client.outcomes import MigrationOutcome, Note, ScaleOutcome, Submitted, silent


class Client(Connection):
    """What an operator does to the managed apps, one method a change."""

    # -- lifecycle --------------------------------------------------------------------------------

    def submit(self, app_name: str, wait_s: float) -> Submitted:
        """Submit the app (its script or pipeline) and wait until its queries run."""
        from sparkscale.apps.driver_record import current_driver
        from sparkscale.apps.submit import PipelineError, submit
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
        from sparkscale.config.identities import OPERATOR
        from sparkscale.daemon import manual
        from sparkscale.monitors.spark_rest import SparkRestError
        from sparkscale.redisconn import connect_as

        cfg = self.with_app(app_name)
        app = cfg.app(app_name)
        redis_client = connect_as(cfg, OPERATOR)
        with self.zookeeper() as zk:
            store = self.for_app(app_name).store(zk, redis_client)
            leader = store.leaders.current_leader(app_name)
            if leader is not None:
                note(f"{app_name} is led by {leader}: asking it to scale to {to} executors")
                name = manual.submit_request(store.requests, app_name, to, self.by, timeout_s)
                answer = store.requests.wait_result(app_name, name, timeout_s)
                if answer is None:
                    raise Unavailable(f"no answer within {timeout_s:g} s; the request was withdrawn")
                return ScaleOutcome(answer.ok, "done" if answer.ok else "not done", answer.detail,
                                    answer.decision_id, answer.leader, None)
            with self.leader_lock(zk, app_name) as election:
                ctx = ActuationContext(cfg, app, zk, redis_client, election.epoch or 0, lambda: election.is_leader,
                                       self.by)
                try:
                    current = len(active_executor_ids(ctx.rest, app_name))
                except SparkRestError as exc:
                    raise Unavailable(f"{app_name} does not answer on its Spark REST API: {exc}") from None
                # The same dispatch as the daemon's: logged, carried out, its result logged.
                decision_id, result = manual.carry_out(store.actions, ctx, to, self.by, current=current,
                                                       snapshot_id="", at=time.time())
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
