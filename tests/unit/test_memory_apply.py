"""Setting the recommended executor memory (issue 33, `policy.memory.apply`): the planner proposes a
`set_executor_memory` action only when applying is on and the change is at least the step, the
guards hold it like any other change, and its actuator restarts the whole app with the new shape
through the migration path, a refusal of which is its failed result. No Spark, Redis or ZooKeeper."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from sparkscale.actuators import executor_memory
from sparkscale.actuators.base import ActuationContext, actuator_for, dispatch
from sparkscale.actuators.executor_memory import ExecutorMemoryActuator
from sparkscale.cli.offline import plan_command
from sparkscale.config import AppConfig, Config, GuardsConfig, PolicyConfig
from sparkscale.config.memory import MemoryPolicyConfig
from sparkscale.model.action_result import ActionResult
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.plan import Action, ActionType, Plan
from sparkscale.policies import planner
from sparkscale.policies.history import DecisionHistory, PastDecision
from sparkscale.protocol.queries import QueryInfo, queries_key
from sparkscale.protocol.znodes import journal_path
from tests.unit.fake_redis import fake_redis
from tests.unit.fakezk import FakeZk, hold_lock
from tests.unit.test_autoscaler import APP as LOOP_APP
from tests.unit.test_autoscaler import loop
from tests.unit.test_memory import APP, LOOP_OFF, NOW, OFF, guard, lines, scale_plan, snap

APPLY = MemoryPolicyConfig(apply=True)
RECOMMEND = MemoryPolicyConfig(recommend=True, apply=True)
GC_REASON = "executor memory 1024 -> 1536 MB (GC 30 % of task time)"


def memory_actions(plan: Plan) -> list[Action]:
    return [a for a in plan.actions if a.type == ActionType.SET_EXECUTOR_MEMORY]


def given_history(*decisions: PastDecision, **over: Any) -> DecisionHistory:
    return DecisionHistory(decisions=decisions, **over)


def proposed_at(at: float, from_mb: int = 1024, to_mb: int = 1536) -> PastDecision:
    return PastDecision(at, Plan("test", "app", actions=(Action.set_executor_memory("q", from_mb, to_mb, "x"),)))


def guard_with(plan: Plan, snapshot: Any, memory: MemoryPolicyConfig, history: DecisionHistory,
               loop_config: Any = LOOP_OFF, app: AppConfig = APP, **settings: Any) -> Plan:
    from sparkscale.policies.guards import GuardInput, apply_guards

    given = GuardInput(snapshot, history, app, migration_running=history.migration_running,
                       last_migration_end=history.last_migration_end, last_action_at=history.last_action_at)
    return apply_guards(plan, given, GuardsConfig(**{**OFF, **settings}), loop_config, memory)


# -- the action ----------------------------------------------------------------------------------------


def test_the_action_type_is_built_in_bounded_in_mib_and_round_trips():
    action = Action.set_executor_memory("q", 1024, 1536, GC_REASON)
    assert action.to_dict() == {"type": "set_executor_memory", "query": "q", "from": 1024, "to": 1536,
                                "reason": GC_REASON}
    assert Action.from_dict(action.to_dict()) == action and action.summary() == "set_executor_memory 1024 -> 1536 MB"
    assert action.executor_direction == 0  # no executor change: the cooldown holds it as "another kind"
    with pytest.raises(ValueError, match="expected an integer >= 256"):
        Action.set_executor_memory("q", 100, 1536, "x")
    with pytest.raises(ValueError, match="needs query"):
        Action(ActionType.SET_EXECUTOR_MEMORY, from_=1024, to=2048)
    # A memory above a million MiB fits, an executor count above a million still does not.
    assert Action.set_executor_memory("q", 1024, 2_000_000, "x").to == 2_000_000
    with pytest.raises(ValueError, match="expected an integer <= 1000000"):
        Action.from_dict({"type": "scale_executors", "from": 2_000_000, "to": 1})


# -- the policy: only with apply, only above the step ---------------------------------------------------


def test_the_gc_guard_emits_the_action_only_with_apply():
    applied = guard(scale_plan(2, 4), snap(2, gc=0.3), APPLY, gc_time_fraction_max=0.1)
    [action] = memory_actions(applied)
    assert (action.query, action.from_, action.to, action.reason) == ("q", 1024, 1536, GC_REASON)
    [line] = lines(applied, "memory apply:")
    assert GC_REASON in line and "restart of the whole app" in line
    assert Plan.from_dict(applied.to_dict()).actions == applied.actions
    for off in (None, MemoryPolicyConfig(), MemoryPolicyConfig(recommend=True)):
        plan = guard(scale_plan(2, 4), snap(2, gc=0.3, heap_mb=900), off, gc_time_fraction_max=0.1)
        assert not memory_actions(plan) and not lines(plan, "memory apply:")
        assert [a.type for a in plan.actions] == ["warn"]  # the recommendation only, as before


def test_the_heap_recommendation_is_applied_from_the_step_on():
    # 760 MB / 0.7 = 1086 -> 1280 MB: 256 MB more, exactly the default step (25 % of 1024, 256 MB).
    [action] = memory_actions(guard(Plan("test", "app"), snap(heap_mb=760), RECOMMEND))
    assert (action.from_, action.to) == (1024, 1280)
    assert action.reason == "executor memory 1024 -> 1280 MB (heap peak 760 MB, for a peak at 70 % of the heap)"
    # A step of 30 % (308 MB) is not reached: nothing proposed, and the explanation says why.
    small = guard(Plan("test", "app"), snap(heap_mb=760), MemoryPolicyConfig(recommend=True, apply=True,
                                                                                min_change_fraction=0.3))
    assert not memory_actions(small)
    [line] = lines(small, "memory apply:")
    assert "not proposed: under the step of 308 MB" in line
    big_mb = guard(Plan("test", "app"), snap(heap_mb=760), MemoryPolicyConfig(recommend=True, apply=True,
                                                                                 min_change_mb=512))
    assert not memory_actions(big_mb)
    # A heap far below the memory: less memory, by the same rule.
    [down] = memory_actions(guard(Plan("test", "app"), snap(heap_mb=200), RECOMMEND))
    assert (down.from_, down.to) == (1024, 512)
    # The recommendation equal to the memory: nothing to say.
    kept = guard(Plan("test", "app"), snap(heap_mb=700), RECOMMEND)
    assert not memory_actions(kept) and not lines(kept, "memory apply:")


def test_never_above_max_executor_memory_mb():
    capped = guard(scale_plan(2, 4), snap(2, gc=0.3), MemoryPolicyConfig(apply=True, max_executor_memory_mb=1280),
                   gc_time_fraction_max=0.1)
    [action] = memory_actions(capped)
    assert action.to == 1280 and "capped at policy.memory.max_executor_memory_mb" in action.reason
    at_max = guard(scale_plan(2, 4), snap(2, gc=0.3), MemoryPolicyConfig(apply=True, max_executor_memory_mb=1024),
                   gc_time_fraction_max=0.1)
    assert not memory_actions(at_max)
    [line] = lines(at_max, "memory apply:")
    assert "1024 MB kept: 1536 MB recommended" in line
    # An app above the maximum that wants more is not made to shrink by it.
    big = AppConfig(name="app", min_executors=1, max_executors=8, executor_memory_mb=2048)
    plan = guard_with(scale_plan(2, 4), snap(2, gc=0.3), MemoryPolicyConfig(apply=True, max_executor_memory_mb=1024),
                      DecisionHistory.empty(), app=big, gc_time_fraction_max=0.1)
    assert not memory_actions(plan)


def test_the_larger_wish_wins_and_another_change_in_the_plan_defers_it():
    # GC asks 1536, the heap 1280: the larger, with its reason.
    [action] = memory_actions(guard(scale_plan(2, 4), snap(2, gc=0.3, heap_mb=760), RECOMMEND,
                                    gc_time_fraction_max=0.1))
    assert action.reason == GC_REASON
    # A scale-down this cycle: one restart-free change at a time.
    plan = guard(scale_plan(4, 2), snap(4, heap_mb=900), RECOMMEND)
    assert not memory_actions(plan) and [a.type for a in plan.changes] == ["scale_executors"]
    [line] = lines(plan, "memory apply:")
    assert "not proposed: this cycle's plan changes scale_executors 4 -> 2 already" in line


# -- the guards hold it ---------------------------------------------------------------------------------


def test_the_cooldown_the_migration_and_an_action_in_progress_hold_it():
    from sparkscale.config import LoopConfig

    cooling = guard_with(scale_plan(2, 4), snap(2, gc=0.3), APPLY, given_history(last_action_at=NOW - 40),
                         LoopConfig(cooldown_s=60, stabilization_s=0), gc_time_fraction_max=0.1)
    assert not memory_actions(cooling)
    [line] = lines(cooling, "guard cooldown")
    assert "set_executor_memory 1024 -> 1536 MB" in line
    # Past the cooldown (and the settle: the window began after the last change), it goes.
    cooled = guard_with(scale_plan(2, 4), snap(2, gc=0.3), APPLY, given_history(last_action_at=NOW - 90),
                        LoopConfig(cooldown_s=60, stabilization_s=0), gc_time_fraction_max=0.1)
    assert len(memory_actions(cooled)) == 1
    migrating = guard_with(scale_plan(2, 4), snap(2, gc=0.3), APPLY, given_history(migration_running=True),
                           gc_time_fraction_max=0.1)
    assert not memory_actions(migrating) and lines(migrating, "guard migration")
    stabilising = guard_with(scale_plan(2, 4), snap(2, gc=0.3), APPLY, given_history(last_migration_end=NOW - 10),
                             LoopConfig(cooldown_s=0, stabilization_s=60), gc_time_fraction_max=0.1)
    assert not memory_actions(stabilising) and lines(stabilising, "guard migration (stabilising")
    busy = guard_with(Plan("test", "app"), snap(heap_mb=900), RECOMMEND,
                      given_history(action_in_progress="set_executor_memory 1024 -> 1536 MB"))
    assert not memory_actions(busy) and lines(busy, "guard in progress")


def test_a_proposal_the_executors_did_not_get_is_not_repeated_within_retry_after_s():
    history = given_history(proposed_at(NOW - 100))
    held = guard_with(Plan("test", "app"), snap(heap_mb=900), RECOMMEND, history)
    assert not memory_actions(held)
    [line] = lines(held, "memory apply:")
    assert "held: set_executor_memory 1024 -> 1536 MB was proposed 100 s ago" in line and "retry_after_s" in line
    # After retry_after_s, proposed again; and after one that took effect, the next is not held.
    assert memory_actions(guard_with(Plan("test", "app"), snap(heap_mb=900), RECOMMEND,
                                     given_history(proposed_at(NOW - 1801))))
    done = given_history(proposed_at(NOW - 100, 512, 1024))
    assert memory_actions(guard_with(Plan("test", "app"), snap(heap_mb=900), RECOMMEND, done))


def test_the_planner_carries_it_to_the_plan_json():
    config = Config(apps=[APP], guards=GuardsConfig(**OFF), loop=LOOP_OFF, policy=PolicyConfig(memory=RECOMMEND))
    plan = planner.decide(snap(heap_mb=900), DecisionHistory.empty(), config, APP)
    assert [a for a in plan.to_dict()["actions"] if a["type"] == "set_executor_memory"] == [
        {"type": "set_executor_memory", "query": "q", "from": 1024, "to": 1536,
         "reason": "executor memory 1024 -> 1536 MB (heap peak 900 MB, for a peak at 70 % of the heap)"}]


def test_sparkscale_plan_json_shows_the_action(tmp_path):
    snapshot = tmp_path / "s.json"
    snapshot.write_text(json.dumps(snap(heap_mb=900).to_dict()))
    args = [str(snapshot), "--json", "--set", "policy.memory.recommend=true", "--set", "policy.memory.apply=true"]
    result = CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(plan_command, args)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    [action] = [a for a in plan["actions"] if a["type"] == "set_executor_memory"]
    assert (action["from"], action["to"]) == (1024, 1536)
    assert any(line.startswith("memory apply: executor memory 1024 -> 1536 MB") for line in plan["explanation"])
    off = CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(plan_command, args[:-2])
    assert all(a["type"] != "set_executor_memory" for a in json.loads(off.output)["actions"])


# -- advise and observe carry nothing out ---------------------------------------------------------------


MEMORY_PLAN = Plan("ds2", LOOP_APP, actions=(Action.set_executor_memory("q", 1024, 1536, GC_REASON),))


@pytest.mark.parametrize(("mode", "decided", "started"), [("act", "acted", 1), ("advise", "dry_run", 0),
                                                          ("observe", "observe", 0)])
def test_the_app_mode_decides_whether_the_memory_action_runs(mode, decided, started):
    run = loop(MEMORY_PLAN)
    run.autoscaler.configure(Config.model_validate(
        {"apps": [{"name": LOOP_APP, "pipeline": "wordcount", "mode": mode}]}))
    run.autoscaler.cycle(LOOP_APP)
    [event] = run.decided()
    assert event.decision.mode == decided and len(run.executor.started) == started


# -- the actuator ---------------------------------------------------------------------------------------


@dataclass
class FakeMigration:
    """The migration actuator's seam: what it was asked, and its answer."""

    answer: str = "done"
    asked: list[tuple[Action, ExecutorShape | None]] = field(default_factory=list)

    def __call__(self) -> FakeMigration:
        return self

    def execute(self, action: Action, ctx: ActuationContext) -> ActionResult:
        self.asked.append((action, ctx.shape))
        return ActionResult(action, self.answer, f"migrated ({self.answer})", figures={"migration": "mig-1"})


def context(redis: Any = None, zk: Any = None, memory_mb: int = 1024) -> ActuationContext:
    app = AppConfig(name="a", pipeline="wordcount", executor_cores=2, executor_memory_mb=memory_mb,
                    shuffle_partitions=8)
    return ActuationContext(Config(apps=[app]), app, zk, redis, 3, lambda: True, "test",  # type: ignore[arg-type]
                            restart_app=lambda: None)


def test_the_actuator_is_registered_and_restarts_the_app_with_the_new_shape(monkeypatch):
    assert isinstance(actuator_for("set_executor_memory"), ExecutorMemoryActuator)
    fake = FakeMigration()
    monkeypatch.setattr(executor_memory, "MigrationActuator", fake)
    monkeypatch.setattr(executor_memory, "query_partitions", lambda _r, _p, app, query, configured: 12)
    action = Action.set_executor_memory("q", 1024, 1536, GC_REASON)
    result = ExecutorMemoryActuator().execute(action, context())
    [(restart, shape)] = fake.asked
    assert shape == ExecutorShape(2, 1536)  # the cores as they are
    assert (restart.type, restart.query, restart.from_, restart.to) == ("set_parallelism", "q", 12, 12)
    assert (result.action, result.status, result.detail, result.figures) == (
        action, "done", "migrated (done)", {"migration": "mig-1"})
    fake.answer = "failed"
    assert ExecutorMemoryActuator().execute(action, context()).status == "failed"
    # Executors that already have it: nothing restarted.
    assert ExecutorMemoryActuator().execute(action, context(memory_mb=1536)).status == "skipped"
    assert len(fake.asked) == 2


def query(**over: Any) -> QueryInfo:
    base = {"name": "q", "id": "id-q", "run_id": "r", "status": "active", "checkpoint": "file:/ck/q",
            "restartable": True, "committed": True, "sources": ("file",),
            "source_descriptions": ("FileStreamSource[file:/data/in]",),
            "state_store_provider": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}
    return QueryInfo(**{**base, **over})


class FakeLog:
    def __init__(self) -> None:
        self.results: list[ActionResult] = []

    def append_decision(self, record: Any, snapshot: Any = None) -> str:
        return "1-0"

    def append_results(self, decision_id: str, app: str, results: Any) -> str:
        self.results += list(results)
        return "2-0"


@pytest.mark.parametrize(("other", "message"), [
    (query(name="id-u", session_checkpoint=True),
     r"cannot be restarted for a new executor shape: query id-u .*queryName"),
    (query(name="lines", sources=("socket",), source_descriptions=("TextSocketV2[host: localhost, port: 9]",)),
     r"cannot be restarted for a new executor shape: query lines .*TextSocketV2"),
])
def test_a_refused_restart_is_the_actions_failed_result_logged(other, message):
    zk = FakeZk(session=0x1001)
    hold_lock(zk, "/sparkscale", "a", epoch=3)
    published = {queries_key("sparkscale:", "a"): {i.name: i.to_json() for i in (query(), other)}}
    ctx = context(fake_redis(hashes=published), zk)  # what the restart reads before it refuses: the agent's queries
    action = Action.set_executor_memory("q", 1024, 1536, GC_REASON)
    action_log = FakeLog()
    with capture_logs() as logs:
        _decision, [result] = dispatch(action_log, "decision", [action], ctx)
    assert result.action == action and result.status == "failed"
    assert re.search(message, result.detail), result.detail
    assert action_log.results == [result]  # logged as the decision's result
    assert any(e["event"] == "actuator.failed" and e["action"] == action.summary() for e in logs)
    assert zk.exists(journal_path("/sparkscale", "a")) is None  # refused before anything was journaled
