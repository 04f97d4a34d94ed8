"""DS2's targets judged on hand-made runs (bench.targets): medians of the repeats, met or missed and
by how much, and what cannot be judged."""

from __future__ import annotations

from sparkscale_lab.bench.measures import Segment
from sparkscale_lab.bench.targets import evaluate_targets, summary

SEGS = [Segment(0, 45, 15), Segment(45, 135, 60), Segment(135, 225, 15)]


def run(controller: str, backlog_s: float, over: float | None = 1.2, conv: tuple = (0, 30, 40),
        actions: tuple = (0, 1, 1), reversals: int = 0, lost: int = 0, duplicated: int = 0,
        oom: int | None = None) -> dict:
    return {"controller": controller, "lost": lost, "duplicated": duplicated, "executors_lost_oom": oom,
            "measures": {"slo_backlog_s": backlog_s, "over_provisioning": over, "convergence_s": list(conv),
                         "actions_per_segment": list(actions), "steady_reversals": reversals,
                         "scaling_actions": sum(actions)}}


def by_key(checks) -> dict:
    return {c.key: c for c in checks}


def baseline() -> list[dict]:
    return [run("static", 40, 2.8), run("static", 50, 2.8), run("static", 45, 2.8),
            run("spark-dra", 100, 2.5), run("spark-dra", 120, 2.5), run("spark-dra", 80, 2.5),
            run("ds2-baseline", 30, 1.6, actions=(1, 2, 1)), run("ds2-baseline", 20, 1.5, actions=(0, 2, 2))]


def test_every_target_met_on_the_median_of_the_repeats():
    # One bad repeat (backlog 90 s, 3 actions at the first change) does not move the median.
    ds2 = [run("ds2", 20), run("ds2", 30), run("ds2", 90, 1.25, actions=(0, 3, 1))]
    checks = by_key(evaluate_targets([*baseline(), *ds2], SEGS, piecewise_constant=True))
    assert all(c.met is True for c in checks.values()), [c for c in checks.values() if not c.met]
    assert checks["backlog_vs_static"].measured == "ds2 30 s, static 45 s"
    assert checks["backlog_vs_spark_dra"].measured == "ds2 30 s, spark-dra 100 s (half: 50 s)"
    assert checks["over_provisioning"].measured == "1.2x"
    assert checks["converged_each_change"].measured == "60/s @45s: 30 s, 1 actions; 15/s @135s: 40 s, 1 actions"
    assert checks["fewer_actions_than_baseline"].measured == "ds2 2, ds2-baseline 4"  # medians of 2, 2, 4 and 4, 4
    assert summary(checks.values()) == "7 met, 0 missed, 0 not judged"


def test_missed_targets_say_by_how_much():
    ds2 = [run("ds2", 60, 1.6, conv=(0, None, 40), actions=(0, 3, 1), reversals=1, lost=2),
           run("ds2", 55, 1.5, conv=(0, None, 50), actions=(0, 3, 2), reversals=1, duplicated=1),
           run("ds2", 70, 1.4, conv=(0, 70, 45), actions=(0, 2, 1), reversals=0)]
    checks = by_key(evaluate_targets([*baseline(), *ds2], SEGS, piecewise_constant=True))
    assert checks["backlog_vs_static"].met is False and checks["backlog_vs_static"].missed_by == "15 s over"
    assert checks["backlog_vs_spark_dra"].met is False and checks["backlog_vs_spark_dra"].missed_by == "10 s over"
    assert checks["over_provisioning"].met is False and checks["over_provisioning"].missed_by == "0.2x over"
    conv = checks["converged_each_change"]
    assert conv.met is False
    assert conv.missed_by == "60/s @45s not converged (2/3 runs never); 60/s @45s: 1 actions too many"
    assert "60/s @45s: never (2/3 never), 3 actions" in conv.measured
    rev = checks["no_steady_reversal"]
    assert rev.met is False and rev.measured == "1 (runs: 1, 1, 0)"
    lost = checks["nothing_lost_or_duplicated"]  # summed, not a median: one loss is a miss
    assert lost.met is False and lost.missed_by == "2 lost, 1 duplicated"
    fewer = checks["fewer_actions_than_baseline"]  # ds2's median of 4, 5, 3 against the baseline's 4: not fewer
    assert fewer.met is False and fewer.measured == "ds2 4, ds2-baseline 4" and fewer.missed_by == "as many"
    assert summary(checks.values()) == "0 met, 7 missed, 0 not judged"


def test_what_cannot_be_judged_is_not_a_pass():
    ds2 = [run("ds2", 10, None)]
    checks = by_key(evaluate_targets([run("static", 20), *ds2], SEGS, piecewise_constant=True))
    assert checks["backlog_vs_static"].met is True
    assert checks["backlog_vs_spark_dra"].met is None and "no spark-dra run" in checks["backlog_vs_spark_dra"].measured
    assert checks["over_provisioning"].met is None  # not calibrated
    # A sine has no step: convergence and reversals are not judged, the rest is.
    sine = by_key(evaluate_targets([*baseline(), run("ds2", 10)], [Segment(0, 240, 37.5)], piecewise_constant=False))
    assert sine["converged_each_change"].met is None and sine["no_steady_reversal"].met is None
    assert sine["backlog_vs_spark_dra"].met is True and sine["over_provisioning"].met is True
    # Without a ds2 run there is nothing to judge.
    (only,) = evaluate_targets(baseline(), SEGS, piecewise_constant=True)
    assert only.met is None and "no ds2 run" in only.measured


def test_more_actions_than_the_baseline_say_how_many_and_without_it_nothing_is_judged():
    more = by_key(evaluate_targets([*baseline(), run("ds2", 5, actions=(2, 3, 2))], SEGS, piecewise_constant=True))
    assert more["fewer_actions_than_baseline"].met is False
    assert more["fewer_actions_than_baseline"].missed_by == "3 more"
    alone = by_key(evaluate_targets([run("static", 20), run("ds2", 10)], SEGS, piecewise_constant=True))
    assert alone["fewer_actions_than_baseline"].met is None
    assert alone["fewer_actions_than_baseline"].measured == "not judged: no ds2-baseline run with this figure"


def test_a_memory_case_judges_the_out_of_memory_the_guard_prevents():
    def memory(ds2_oom: tuple, baseline_oom: tuple) -> dict:
        runs = [*(run("ds2", 0, oom=n) for n in ds2_oom), *(run("ds2-baseline", 0, oom=n) for n in baseline_oom)]
        return by_key(evaluate_targets(runs, SEGS, piecewise_constant=True, judges_out_of_memory=True))

    prevented = memory((0, 0), (1, 2))["no_out_of_memory"]
    assert prevented.met is True and prevented.measured == "ds2 0, ds2-baseline 3 over the runs"
    hit = memory((0, 1), (1, 2))["no_out_of_memory"]
    assert hit.met is False and hit.missed_by == "1 executor(s) lost"
    untested = memory((0, 0), (0, 0))["no_out_of_memory"]  # the baseline never ran out: no test of the guard
    assert untested.met is None and "did not test the guard" in untested.measured
    uncounted = memory((None,), (2,))["no_out_of_memory"]
    assert uncounted.met is None and uncounted.measured == "not judged: no ds2 run counted them"
    # Other cases are not judged on it at all.
    plain = by_key(evaluate_targets([run("ds2", 0, oom=3)], SEGS, piecewise_constant=True))
    assert "no_out_of_memory" not in plain
