"""The scaling benchmark's `oracle` row: its schedule (the calibration's count for the load of the
next lead seconds, up before a rise, down after the fall), the thread that carries it out, and the
command line's refusal without a calibration. No Spark."""

from __future__ import annotations

import threading
import time

from click.testing import CliRunner

from sparkscale.cli import main
from sparkscale_lab.bench.environment import BenchEnv
from sparkscale_lab.bench.measures import needed_from_calibration
from sparkscale_lab.bench.scaling_controllers import CONTROLLERS, KNOWN, ORACLES, POLICY_OF
from sparkscale_lab.bench.scaling_oracle import Oracle, oracle_schedule
from sparkscale_lab.pipelines.profiles import parse_profile

DAG_CALIBRATION = {15.0: 1, 60.0: 2}  # docs/results/bench_scaling_33_dag: the dag-linear calibration
CLICKS_CALIBRATION = {15.0: 1, 30.0: 1, 45.0: 1, 60.0: 2}


def test_steps_rise_ahead_by_the_lead_and_fall_only_after_the_high_rate():
    profile = parse_profile("steps:15@45s,60@90s,15@90s")
    schedule = oracle_schedule(profile, needed_from_calibration(DAG_CALIBRATION), 4, lead_s=15)
    # 60/s begins at 45 s: 2 executors from 30 s; 15/s again from 135 s: back to 1 then, not before.
    assert schedule == [(0.0, 1), (30.0, 2), (135.0, 1)]
    no_lead = oracle_schedule(profile, needed_from_calibration(DAG_CALIBRATION), 4, lead_s=0)
    assert no_lead == [(0.0, 1), (45.0, 2), (135.0, 1)]


def test_sine_holds_two_while_the_rate_is_above_one_executors_calibrated_45_per_s():
    profile = parse_profile("sine:37.5,22.5,120s@240s")
    schedule = oracle_schedule(profile, needed_from_calibration(CLICKS_CALIBRATION), 4, lead_s=15)
    # The rate passes 45/s at about 6.5 s and falls below it at about 53.5 s (and again 120 s later).
    assert schedule[0] == (0.0, 2)
    assert [n for _, n in schedule] == [2, 1, 2, 1]
    down, up = schedule[1][0], schedule[2][0]
    assert 53 <= down <= 55 and 126 - 15 - 1 <= up <= 127 - 15


def test_the_spare_oracle_holds_one_more_within_the_maximum():
    profile = parse_profile("steps:15@45s,60@90s,15@90s")
    needed = needed_from_calibration(DAG_CALIBRATION)
    assert oracle_schedule(profile, needed, 4, lead_s=15, spare=1) == [(0.0, 2), (30.0, 3), (135.0, 2)]
    assert oracle_schedule(profile, needed, 2, lead_s=15, spare=1) == [(0.0, 2)]


def test_a_rate_above_every_calibrated_one_gets_the_maximum_and_no_load_keeps_one():
    needed = needed_from_calibration(DAG_CALIBRATION)
    assert oracle_schedule(parse_profile("steps:90@10s"), needed, 4, lead_s=0) == [(0.0, 4)]
    assert oracle_schedule(parse_profile("steps:0@10s,15@10s"), needed, 4, lead_s=0) == [(0.0, 1)]
    assert oracle_schedule(parse_profile("steps:90@10s"), needed, 3, lead_s=0) == [(0.0, 3)]


def _env() -> BenchEnv:
    return BenchEnv.__new__(BenchEnv)  # the oracle hands it to the scale function, which ignores it here


def test_the_oracle_scales_in_order_at_each_due_time_and_reports_a_failed_step():
    calls: list[tuple[float, int]] = []
    done = threading.Event()

    def scale(env: BenchEnv, to: int) -> None:
        calls.append((time.time(), to))
        if to == 3:
            raise RuntimeError("scale-executors --to 3 failed: no agent")
        if len(calls) == 3:
            done.set()

    t0 = time.time()
    oracle = Oracle(_env(), [(0.0, 2), (0.3, 3), (0.6, 1)], t0, scale=scale).start()
    assert done.wait(10)
    oracle.stop()
    assert [to for _, to in calls] == [2, 3, 1]
    assert calls[1][0] - t0 >= 0.3 and calls[2][0] - t0 >= 0.6  # never before its time
    assert oracle.failures == ["oracle: scaling to 3 at 0.3 s failed: scale-executors --to 3 failed: no agent"]


def test_stopping_the_oracle_cancels_the_steps_not_yet_due():
    calls: list[int] = []
    oracle = Oracle(_env(), [(3600.0, 2)], time.time(), scale=lambda env, to: calls.append(to)).start()
    oracle.stop()
    assert calls == [] and oracle.failures == []


def test_the_oracle_runs_only_when_named_without_a_daemon_and_needs_the_calibration():
    for oracle in ("oracle", "oracle-spare"):
        assert oracle in ORACLES and oracle in KNOWN and oracle not in CONTROLLERS and oracle not in POLICY_OF
        bad = CliRunner().invoke(main, ["bench", "scaling", "--controllers", f"ds2,{oracle}", "--no-calibration",
                                        "--out", "unused"])
        assert bad.exit_code == 2 and "needs the calibration" in bad.output
