"""Adding a policy or an actuator is one class plus its registration: no other file changes.

A policy defined here (with its own config section) runs through the planner and through
`sparkscale plan`; a decision that depends on the history replays offline with `--history FILE`;
an actuator for a new action type defined here runs through `dispatch`, which logs the decision
before acting and the results after."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner
from pydantic import Field

from sparkscale import registry as registry_module
from sparkscale.actuators.base import ActuationContext, dispatch, register_actuator
from sparkscale.cli.offline import plan_command
from sparkscale.config import AppConfig, Config, ConfigError, ConfigSection, load_config
from sparkscale.model import plan as plan_module
from sparkscale.model.action_result import ActionResult
from sparkscale.model.plan import Action, Observation, Plan, register_action_type
from sparkscale.model.snapshot import Snapshot, load_snapshot
from sparkscale.policies.base import register_policy, registered_policies
from sparkscale.policies.history import DecisionHistory, PastDecision
from sparkscale.policies.planner import decide
from sparkscale.registry import ACTUATORS, POLICIES

FIXTURE = Path(__file__).parent / "fixtures" / "design_snapshot.json"


class ShrinkConfig(ConfigSection):
    """`policy.shrink`: how many executors to drop per decision."""

    by: int = Field(1, ge=1)


@pytest.fixture
def shrink(monkeypatch: pytest.MonkeyPatch) -> str:
    """A policy registered for one test (the registry is restored afterwards)."""
    registered_policies()  # the built-ins load into the real registry first
    monkeypatch.setattr(POLICIES, "items", dict(POLICIES.items))

    @register_policy
    class ShrinkPolicy:
        name: ClassVar[str] = "shrink"
        config_model: ClassVar[type[ShrinkConfig]] = ShrinkConfig

        def decide(self, snapshot: Snapshot, history: DecisionHistory, cfg: Any, app: AppConfig) -> Plan:
            current = len(snapshot.executors)
            to = max(current - cfg.section(self.name).by, 0)
            return Plan(self.name, snapshot.app, actions=(Action.scale_executors(current, to, "shrink"),),
                        explanation=(f"shrink by {cfg.section(self.name).by}",))

    return ShrinkPolicy.name


def two_executor_snapshot(tmp_path: Path) -> Path:
    data = json.loads(FIXTURE.read_text())
    data["executors"] = [{"id": "1", "host": "127.0.0.1", "cores": 1}, {"id": "2", "host": "127.0.0.1", "cores": 1}]
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    return path


def run_plan(*args: str) -> Any:
    return CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(plan_command, list(args))


def test_a_policy_registered_here_runs_through_the_planner_with_its_own_config(shrink, tmp_path):
    snapshot = load_snapshot(two_executor_snapshot(tmp_path))
    cfg = load_config(None, [f"policy.name={shrink}", "guards.scale_down_delay_s=0"])
    plan = decide(snapshot, DecisionHistory.empty(), cfg, AppConfig(name="wordcount"))
    assert plan.policy == "shrink" and plan.changes == (Action.scale_executors(2, 1, "shrink"),)
    assert plan.observation.recommended_executors == 1  # the guards ran on it
    # Its section is validated by the model it declared, like a built-in's.
    assert load_config(None, ["policy.shrink.by=2"]).policy.section("shrink").by == 2
    with pytest.raises(ConfigError, match=r"policy\.shrink\.by"):
        load_config(None, ["policy.shrink.by=0"])
    with pytest.raises(ConfigError, match=r"policy.name"):
        load_config(None, ["policy.name=not_registered"])


def test_a_policy_registered_here_runs_through_sparkscale_plan(shrink, tmp_path):
    snap = two_executor_snapshot(tmp_path)
    out = run_plan(str(snap), "--policy", shrink, "--set", "guards.scale_down_delay_s=0", "--json")
    assert out.exit_code == 0, out.output
    plan = json.loads(out.output)
    assert plan["policy"] == "shrink" and plan["actions"][0]["to"] == 1
    unknown = run_plan(str(snap), "--policy", "nope")
    assert unknown.exit_code == 2 and "shrink" in unknown.output  # the error lists the registered ones


def test_plan_replays_a_decision_that_depended_on_the_history(shrink, tmp_path):
    snap = two_executor_snapshot(tmp_path)
    taken_at = load_snapshot(snap).taken_at
    # Without history the scale-down delay (120 s by default) holds the scale-down back ...
    held = json.loads(run_plan(str(snap), "--policy", shrink, "--json").output)
    assert held["actions"] == [] and any("scale-down delay" in line for line in held["explanation"])
    # ... after 150 s of recommendations for 1 executor (as the daemon's history records them) it goes ahead.
    past = DecisionHistory(tuple(
        PastDecision(taken_at - age, Plan(shrink, "wordcount", observation=Observation(recommended_executors=1)))
        for age in (150.0, 100.0, 50.0)), last_action_at=0.0)
    history_file = tmp_path / "history.json"
    history_file.write_text(json.dumps(past.to_dict()))
    assert DecisionHistory.from_dict(json.loads(history_file.read_text())) == past
    out = run_plan(str(snap), "--policy", shrink, "--history", str(history_file), "--json")
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["actions"][0] | {"reason": ""} == {"type": "scale_executors", "from": 2, "to": 1,
                                                                     "reason": ""}
    history_file.write_text('{"decisions": [{"plan": {}}]}')
    bad = run_plan(str(snap), "--history", str(history_file))
    assert bad.exit_code == 2 and "invalid history" in bad.output


class FakeLog:
    """The action log seam of `dispatch`: what was written, in order."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, Any]] = []

    def append_decision(self, record: Any, snapshot: Any = None) -> str:
        self.entries.append(("decision", record))
        return "1-0"

    def append_results(self, decision_id: str, app: str, results: Any) -> str:
        self.entries.append(("results", (decision_id, app, list(results))))
        return "2-0"


@pytest.fixture
def ping(monkeypatch: pytest.MonkeyPatch) -> list[Action]:
    """An actuator for a new action type `ping`, registered for one test."""
    monkeypatch.setattr(plan_module, "_ACTION_FIELDS", dict(plan_module._ACTION_FIELDS))
    register_action_type("ping", ("executor",))
    ACTUATORS.names()
    monkeypatch.setattr(ACTUATORS, "items", dict(ACTUATORS.items))
    carried_out: list[Action] = []

    @register_actuator
    class PingActuator:
        action_types: ClassVar[tuple[str, ...]] = ("ping",)

        def execute(self, action: Action, ctx: ActuationContext) -> ActionResult:
            carried_out.append(action)
            ok = action.executor != "down"
            return ActionResult(action, "done" if ok else "failed", f"pinged {action.executor} at epoch {ctx.epoch}")

    return carried_out


def test_an_actuator_registered_here_runs_through_dispatch(ping):
    ctx = ActuationContext(Config(), AppConfig(name="a"), None, None, 7, lambda: True, "test")  # type: ignore[arg-type]
    log = FakeLog()
    actions = [Action("ping", executor="3"), Action("ping", executor="down"), Action("ping", executor="4")]
    decision_id, results = dispatch(log, "the decision", actions, ctx, stop_after_failure=True)
    assert decision_id == "1-0" and [e[0] for e in log.entries] == ["decision", "results"]  # logged before acting
    assert [r.status for r in results] == ["done", "failed"] and ping == actions[:2]  # stopped after the failure
    assert results[0].detail == "pinged 3 at epoch 7" and log.entries[1][1] == ("1-0", "a", results)
    _, all_results = dispatch(FakeLog(), "again", actions, ctx)
    assert [r.status for r in all_results] == ["done", "failed", "done"]
    # An action type nobody carries out is a failed result, not a crash.
    register_action_type("unknown_kind")
    [missing] = dispatch(FakeLog(), "x", [Action("unknown_kind")], ctx)[1]
    assert missing.status == "failed" and "no actuator for action type 'unknown_kind'" in missing.detail


def test_a_third_party_policy_loads_through_its_entry_point_group(monkeypatch):
    class Plugged:
        name: ClassVar[str] = "plugged"

        def decide(self, snapshot: Snapshot, history: DecisionHistory, cfg: Any, app: AppConfig) -> Plan:
            return Plan(self.name, snapshot.app)

    asked: list[str] = []

    def entry_points(group: str) -> list[Any]:
        asked.append(group)
        return [SimpleNamespace(name="plugged", value="mypkg.policy:Plugged", load=lambda: Plugged)]

    registered_policies()
    monkeypatch.setattr(POLICIES, "items", dict(POLICIES.items))
    monkeypatch.setattr(POLICIES, "loaded", False)
    monkeypatch.setattr(registry_module.importlib.metadata, "entry_points", entry_points)
    assert "plugged" in registered_policies() and asked == ["sparkscale.policies"]
    assert load_config(None, ["policy.name=plugged"]).policy.name == "plugged"  # the config knows it too
