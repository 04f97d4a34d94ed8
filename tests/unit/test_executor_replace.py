"""`replace_executor` makes before it breaks: one more executor first, then the old one goes, so an
app at min_executors can still move an executor; a replacement that never starts is undone."""

from __future__ import annotations

from typing import Any

from sparkscale.actuators.executors import ExecutorChange, _Failed
from sparkscale.apps.submit import spark_conf
from sparkscale.config import ActuatorConfig, Config
from sparkscale.model.plan import Action


class FakeCluster(ExecutorChange):
    """The agent and the REST API in one: commands change the active executors at once (or never,
    for a cluster with no room)."""

    def __init__(self, active: list[str], room: bool = True):
        super().__init__(zk=None, zk_root="/ss", app="wc", rest=None,  # type: ignore[arg-type]
                         cfg=ActuatorConfig(ack_timeout_s=1.0, confirm_timeout_s=0.2), is_leader=lambda: True)
        self.active, self.room, self.sent = list(active), room, []
        self.next_id = max(int(i) for i in active) + 1

    def _command(self, kind: str, args: dict[str, Any], epoch: int, started: float) -> tuple[str, float, Any]:
        self.sent.append((kind, args))
        if kind == "set_executors":
            while self.room and len(self.active) < args["total"]:
                self.active.append(str(self.next_id))
                self.next_id += 1
            del self.active[args["total"]:]
        elif kind == "decommission":
            if len(self.active) - len(args["executor_ids"]) < 2:  # the agent's min_executors check
                raise _Failed("decommission refused by the agent: below min_executors 2")
            self.active = [i for i in self.active if i not in args["executor_ids"]]
        return f"cmd-{len(self.sent)}", 0.01, None

    def active_executor_ids(self) -> list[str]:
        return list(self.active)


def test_the_replacement_is_asked_for_before_the_old_executor_is_decommissioned():
    cluster = FakeCluster(["1", "2"])  # at min_executors 2: decommission-first would be refused
    result = cluster.execute(Action.replace_executor("2", "spread"), epoch=3)
    assert result.status == "done", result.detail
    assert cluster.sent == [("set_executors", {"total": 3, "surge": True}),
                            ("decommission", {"executor_ids": ["2"]})]
    assert cluster.active == ["1", "3"] and result.executors_after == 2


def test_a_replacement_that_never_starts_is_undone_and_the_old_executor_stays():
    cluster = FakeCluster(["1", "2"], room=False)
    result = cluster.execute(Action.replace_executor("2", "spread"), epoch=3)
    assert result.status == "failed"
    assert result.detail.startswith("the replacement did not start") and "the target is back at 2" in result.detail
    assert cluster.sent == [("set_executors", {"total": 3, "surge": True}), ("set_executors", {"total": 2})]
    assert cluster.active == ["1", "2"]


def test_an_executor_that_is_not_active_is_not_replaced():
    cluster = FakeCluster(["1", "2"])
    result = cluster.execute(Action.replace_executor("9", "slow"), epoch=3)
    assert result.status == "failed" and "executor 9 is not active" in result.detail and cluster.sent == []


def test_the_app_may_run_one_executor_above_max_executors_while_one_is_replaced():
    cfg = Config()
    app = cfg.apps[0]
    assert spark_conf(cfg, app)["spark.cores.max"] == str((app.max_executors + 1) * app.executor_cores)


def test_a_scale_in_that_names_its_executors_decommissions_exactly_those():
    cluster = FakeCluster(["1", "2", "3", "4"])
    result = cluster.execute(Action.scale_executors(4, 2, "edrp", executors=["1", "3"]), epoch=3)
    assert result.status == "done", result.detail
    assert cluster.sent == [("decommission", {"executor_ids": ["1", "3"]})] and cluster.active == ["2", "4"]


def test_a_named_scale_in_whose_executors_changed_leaves_the_choice_to_the_agent():
    cluster = FakeCluster(["1", "2", "4"])  # 3 left since the plan was made
    result = cluster.execute(Action.scale_executors(3, 2, "edrp", executors=["3"]), epoch=3)
    assert result.status == "done", result.detail
    assert cluster.sent == [("set_executors", {"total": 2})] and cluster.active == ["1", "2"]
