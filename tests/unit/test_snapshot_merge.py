"""An app's decision over all its queries: the merged snapshot, DS2 summing the queries' needs, and
the Spark mapping giving each query its own migration."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from sparkscale.cli.offline import plan_command
from sparkscale.config import AppConfig, Config
from sparkscale.model.plan import Action, Plan
from sparkscale.model.snapshot import Snapshot
from sparkscale.model.snapshot_merge import merge_snapshots, query_names, split_operator
from sparkscale.policies.ds2_model import estimate
from sparkscale.policies.history import DecisionHistory
from sparkscale.policies.planner import decide, decide_app, map_to_spark

T = 1000.0


def query_snapshot(query: str, arrival: float = 60.0, stage_rate: float = 100.0, partitions: int = 1,
                   taken_at: float = T, batch_s: float = 0.5, executors: int = 1, **extensions: Any) -> Snapshot:
    """source -> stage0: each of stage0's `partitions` instances processes `stage_rate` rec/s when busy,
    so the query needs arrival / stage_rate cores."""
    per = arrival * 30 / partitions
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": query, "taken_at": taken_at, "window_s": 30.0,
        "trigger_interval_s": 1.0, "batch_duration_s": batch_s,
        "executors": [{"id": str(k + 1), "host": "127.0.0.1", "cores": 1} for k in range(executors)],
        "operators": [
            {"id": "source", "source": True, "parallelism": 1, "arrival_rate": arrival, "backlog": 0,
             "instances": [{"records_in": arrival * 30, "records_out": arrival * 30, "useful_time_s": 30}]},
            {"id": "stage0", "parallelism": partitions, "instances": [
                {"records_in": per, "records_out": per, "useful_time_s": per / stage_rate, "executor": "1"}
                for _ in range(partitions)]},
        ],
        "edges": [["source", "stage0"]],
        "extensions": {"source": {"backlog_known": True}, "host": {"cpu_fraction": 0.5}, **extensions},
    })


def test_one_snapshot_is_its_own_merge():
    snap = query_snapshot("a")
    assert merge_snapshots([snap]) is snap
    assert query_names(snap) == ("a",) and split_operator(("a",), "stage0") == ("a", "stage0")


def test_two_queries_merge_into_one_graph_with_the_executors_once():
    a, b = query_snapshot("a", batch_s=0.5), query_snapshot("b", batch_s=0.9, taken_at=T + 1, executors=2)
    merged = merge_snapshots([a, b])
    assert merged.query == "a+b" and merged.app == "app" and merged.taken_at == T + 1
    assert [op.id for op in merged.operators] == ["a/source", "a/stage0", "b/source", "b/stage0"]
    assert merged.edges == (("a/source", "a/stage0"), ("b/source", "b/stage0"))
    assert [e.id for e in merged.executors] == ["1", "2"]  # shared: listed once
    assert merged.batch_duration_s == 0.9  # the slowest query's batch ratio is the app's
    assert set(merged.extensions["queries"]) == {"a", "b"}
    assert merged.extensions["queries"]["b"]["source"] == {"backlog_known": True}
    assert merged.extensions["host"] == {"cpu_fraction": 0.5}
    assert query_names(merged) == ("a", "b")
    assert split_operator(query_names(merged), "b/stage0") == ("b", "stage0")
    assert Snapshot.from_json(merged.to_json()) == merged


def test_merge_refuses_snapshots_of_several_apps_or_a_query_twice():
    other = Snapshot.from_dict({**query_snapshot("b").to_dict(), "app": "other"})
    with pytest.raises(ValueError, match="several apps"):
        merge_snapshots([query_snapshot("a"), other])
    with pytest.raises(ValueError, match="twice"):
        merge_snapshots([query_snapshot("a"), query_snapshot("a")])
    with pytest.raises(ValueError, match="no snapshot to merge"):
        merge_snapshots([])


def test_ds2_over_two_queries_sums_their_needs():
    a, b = query_snapshot("a"), query_snapshot("b")  # each needs 60 / 100 = 0.6 cores
    assert estimate(a).cores_needed == 1 and estimate(b).cores_needed == 1
    assert estimate(merge_snapshots([a, b])).cores_needed == 2  # ceil(0.6 + 0.6)
    # At the default target utilisation 0.8: ceil(0.75 + 0.75) = 2 cores, one more executor.
    plan = decide_app([a, b], DecisionHistory.empty(), Config(), AppConfig(name="app"))
    assert [x.summary() for x in plan.changes] == ["scale_executors 1 -> 2"]


def two_stage_query(query: str, arrival: float, rates: tuple[float, float], partitions: tuple[int, int]) -> Snapshot:
    """source -> stage0 -> stage1, selectivity 1: stage k's instances process rates[k] rec/s each
    when busy, so stage k needs arrival / rates[k] cores."""
    window_s = 30.0

    def stage(k: int) -> dict[str, Any]:
        per = arrival * window_s / partitions[k]
        return {"id": f"stage{k}", "parallelism": partitions[k], "instances": [
            {"records_in": per, "records_out": per, "useful_time_s": per / rates[k], "executor": "1"}
            for _ in range(partitions[k])]}

    records = arrival * window_s
    return Snapshot.from_dict({
        "version": 1, "app": "app", "query": query, "taken_at": T, "window_s": window_s,
        "executors": [{"id": "1", "host": "127.0.0.1", "cores": 1}],
        "operators": [{"id": "source", "source": True, "parallelism": 1, "arrival_rate": arrival, "backlog": 0,
                       "instances": [{"records_in": records, "records_out": records, "useful_time_s": window_s}]},
                      stage(0), stage(1)],
        "edges": [["source", "stage0"], ["stage0", "stage1"]],
    })


def test_each_query_of_an_app_fits_the_window_apart_since_spark_runs_their_batches_side_by_side():
    # a: stage0 needs 160 / 100 = 1.6 cores on 2 partitions, stage1 160 / 800 = 0.2 on 4;
    # b: stage0 10 / 100 = 0.1 on 2, stage1 10 / (100 / 3) = 0.3 on 4. Σ = 2.2 -> 3 cores.
    a = two_stage_query("a", 160, (100, 800), (2, 4))
    b = two_stage_query("b", 10, (100, 100 / 3), (2, 4))
    est = estimate(merge_snapshots([a, b]))
    # On 3 cores a's stages take 1.6 / 2 + 0.2 / 3 = 0.87 of the window, b's 0.1 / 2 + 0.3 / 3 =
    # 0.15: each fits. Taken as one sequence (1.02) they did not, and 4 cores were asked for.
    assert est.cores_needed == 3 and est.cores_for_partitions == 3
    order = est.adjacency.order
    assert sorted([order[i] for i in part] for part in est.query_parts()) == [
        ["a/source", "a/stage0", "a/stage1"], ["b/source", "b/stage0", "b/stage1"]]
    # A query alone still runs its stages one after another: a stage0 needing 1.9 of its 2
    # partitions leaves 0.05 of the window, too little for 0.2 cores of stage1 on 3 cores (0.067).
    alone = estimate(two_stage_query("a", 190, (100, 950), (2, 4)))
    assert alone.cores_needed == 3 and alone.cores_for_partitions == 4


def test_a_multi_query_apps_capacity_is_bound_by_each_query_apart_and_by_their_shared_cores():
    # The app of the test above (target rate 160 + 10 = 170/s). On 3 cores a's stages take 0.87 of
    # the window and bind: 170 / 0.87. Fitted as one sequence (1.02) the capacity read 167/s, under
    # the load that 3 cores carry, so a scale-up to 3 that fell short could be judged met.
    est = estimate(merge_snapshots([two_stage_query("a", 160, (100, 800), (2, 4)),
                                    two_stage_query("b", 10, (100, 100 / 3), (2, 4))]))
    capacity = est.capacity_rps(3)
    assert capacity == pytest.approx(170 / (1.6 / 2 + 0.2 / 3))
    assert capacity > 170 > 170 / (1.6 / 2 + 0.2 / 3 + 0.1 / 2 + 0.3 / 3)
    # On 1 core the queries' work together (2.2 cores) binds, not either query alone (1.8, 0.4).
    assert est.capacity_rps(1) == pytest.approx(170 / 2.2)


def test_two_queries_that_each_fit_their_partitions_are_not_partition_bound_together():
    # a: 1.8 cores on 2 partitions (0.9 of the window), b: 0.9 on 1 (0.9): 1.8 windows as one
    # sequence, which no core count fits, yet each query fits on its own: 3 cores, no repartition.
    a = two_stage_query("a", 180, (100, 100_000), (2, 2))
    b = two_stage_query("b", 90, (100, 100_000), (1, 1))
    est = estimate(merge_snapshots([a, b]))
    assert not est.partition_bound and est.cores_for_partitions == 3


def test_a_partition_bound_stage_of_one_query_migrates_that_query_alone():
    a = query_snapshot("a", arrival=60, partitions=4)
    b = query_snapshot("b", arrival=300, partitions=2)  # stage0: ceil(300 / (0.8 x 100)) = 4 partitions
    history = DecisionHistory(partitions={"a": 4, "b": 2})
    app = AppConfig(name="app", shuffle_partitions=4, max_executors=8)
    plan = decide_app([a, b], history, Config(), app)
    (migration,) = [x for x in plan.actions if x.type == "set_parallelism"]
    assert (migration.query, migration.operator, migration.from_, migration.to) == ("b", "stage0", 2, 4)
    assert migration.summary() == "set_parallelism b/stage0 2 -> 4"
    assert any("one migration of query b to 4 partitions" in line for line in plan.explanation)


def not_migratable(snapshot: Snapshot, why: str) -> Snapshot:
    data = snapshot.to_dict()
    data["extensions"]["query"] = {"migratable": False, "not_migratable": why}
    return Snapshot.from_dict(data)


def test_a_query_the_agent_cannot_migrate_gets_no_migration_and_the_plan_says_why():
    a = query_snapshot("a", arrival=60, partitions=4)
    why = "it has no checkpoint location"
    b = not_migratable(query_snapshot("b", arrival=300, partitions=2), why)
    history = DecisionHistory(partitions={"a": 4, "b": 2})
    app = AppConfig(name="app", shuffle_partitions=4, max_executors=8)
    plan = decide_app([a, b], history, Config(), app)
    assert not [x for x in plan.actions if x.type == "set_parallelism"]
    assert any(f"query b cannot be migrated: {why}" in line for line in plan.explanation)
    assert [x.type for x in plan.actions if x.type == "scale_executors"]  # the executors are still sized
    alone = decide(not_migratable(query_snapshot("b", arrival=300, partitions=2), why), history, Config(), app)
    assert not [x for x in alone.actions if x.type == "set_parallelism"]


def test_map_to_spark_groups_wishes_by_query_each_against_its_own_partitions():
    actions = (Action.scale_executors(1, 2, "more"),
               Action.set_parallelism("a/stage1", 4, 6, "bound"), Action.set_parallelism("b/stage1", 2, 3, "bound"),
               Action.set_parallelism("b/stage2", 2, 5, "bound more"), Action.set_parallelism("a/stage0", 1, 8, "src"),
               Action.set_parallelism("c/stage1", 2, 4, "no such query"))
    mapped = map_to_spark(Plan("ds2", "app", actions=actions), "a+b", {"a": 4, "b": 2})
    assert [x.summary() for x in mapped.actions] == [
        "scale_executors 1 -> 2", "set_parallelism a/stage1 4 -> 6", "set_parallelism b/stage2 2 -> 5"]
    assert mapped.actions[2].query == "b" and "stage1: bound" in mapped.actions[2].reason
    assert any("dropped set_parallelism a/stage0 1 -> 8" in line for line in mapped.explanation)
    assert any("dropped set_parallelism c/stage1" in line and "none of the queries" in line
               for line in mapped.explanation)


def test_decide_app_on_one_query_is_decide():
    snap = query_snapshot("counts", arrival=300, partitions=2)
    history = DecisionHistory(partitions={"counts": 2})
    app = AppConfig(name="app", max_executors=8)
    assert decide_app([snap], history, Config(), app) == decide(snap, history, Config(), app)


def test_plan_command_takes_a_list_of_query_snapshots(tmp_path):
    import json

    path = tmp_path / "queries.json"
    path.write_text(json.dumps([query_snapshot("a").to_dict(), query_snapshot("b").to_dict()]))
    result = CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(plan_command, [str(path), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert set(plan["parallelism"]) == {"a/source", "a/stage0", "b/source", "b/stage0"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([query_snapshot("a").to_dict(), {"version": 1}]))
    result = CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(plan_command, [str(bad)])
    assert result.exit_code == 2 and "[1].app: missing" in result.output
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps([query_snapshot("a").to_dict()] * 2))
    result = CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(plan_command, [str(twice)])
    assert result.exit_code == 2 and "twice" in result.output
