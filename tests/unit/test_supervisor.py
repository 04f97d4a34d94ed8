"""The driver supervisor: restarts a driver that crashed after its queries started, with back-off and
a budget; never restarts one that failed before starting; stops it on request. Real child processes
(a small Python program stands in for spark-submit), no Spark."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from sparkscale.apps import supervisor as supervisor_mod
from sparkscale.apps.driver_record import current_driver
from sparkscale.apps.run_files import pipelines_dir, started_marker
from sparkscale.apps.supervisor import RestartBudget, run_supervised
from sparkscale.config import DriversConfig, load_config

# A stand-in driver: writes the started marker (as agent/bootstrap.py does once the queries run)
# unless told not to, then exits with the code its run number is given in PLAN.
FAKE_DRIVER = """
import json, sys, time, pathlib
marker, plan_path, runs_path = map(pathlib.Path, sys.argv[1:4])
runs = int(runs_path.read_text()) if runs_path.exists() else 0
runs_path.write_text(str(runs + 1))
step = json.loads(plan_path.read_text())[min(runs, len(json.loads(plan_path.read_text())) - 1)]
if step["start"]:
    marker.write_text("started")
time.sleep(step.get("run_s", 0.2))
if step.get("unlink"):
    marker.unlink()  # as the real driver's `finally` does on its way out, even after a crash
sys.exit(step["code"])
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    cfg = load_config(None, [f"cluster.run_dir={tmp_path}", "drivers.restart_delay_s=0.05",
                             "drivers.max_restart_delay_s=0.2", "drivers.max_restarts=2"])
    script = tmp_path / "driver.py"
    script.write_text(FAKE_DRIVER)
    plan, runs = tmp_path / "plan.json", tmp_path / "runs"
    launched: list[int] = []

    def launch(cfg_, app_name, config_path, overrides):
        pipelines_dir(cfg_).mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen([sys.executable, str(script), str(started_marker(cfg_, app_name)),
                                 str(plan), str(runs)])
        launched.append(proc.pid)
        return proc

    monkeypatch.setattr(supervisor_mod, "launch_driver", launch)

    def run(steps, stop=None):
        plan.write_text(json.dumps(steps))
        return run_supervised(cfg, "wordcount", None, [], stop or threading.Event())

    return cfg, run, launched, runs


def test_a_driver_that_crashes_after_starting_is_restarted_until_it_ends_normally(env):
    _cfg, run, launched, runs = env
    code = run([{"start": True, "code": 1}, {"start": True, "code": -9 % 256}, {"start": True, "code": 0}])
    assert code == 0
    assert runs.read_text() == "3" and len(set(launched)) == 3


def test_a_crashed_driver_that_removed_its_marker_on_the_way_out_is_still_restarted(env):
    # SIGKILL of spark-submit's JVM orphans the Python driver, whose `finally` removes the marker
    # before the supervisor looks: the supervisor remembers that it saw the queries start.
    _cfg, run, _launched, runs = env
    code = run([{"start": True, "code": 137, "run_s": 1.5, "unlink": True}, {"start": True, "code": 0}])
    assert code == 0 and runs.read_text() == "2"


def test_a_driver_that_fails_before_its_queries_start_is_not_restarted(env):
    _cfg, run, _launched, runs = env
    assert run([{"start": False, "code": 3}, {"start": True, "code": 0}]) == 3
    assert runs.read_text() == "1"


def test_the_supervisor_gives_up_after_max_restarts_within_the_window(env):
    cfg, run, _launched, runs = env
    assert run([{"start": True, "code": 7}]) == 7
    assert runs.read_text() == str(1 + cfg.drivers.max_restarts)


def test_stop_ends_the_running_driver_and_the_supervisor_returns_0(env):
    cfg, run, launched, _runs = env
    stop = threading.Event()
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(run([{"start": True, "code": 0, "run_s": 60}], stop)))
    thread.start()
    deadline = time.monotonic() + 20
    while current_driver(cfg, "wordcount") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    driver = current_driver(cfg, "wordcount")
    assert driver is not None and driver.pid == launched[0]
    stop.set()
    thread.join(timeout=30)
    assert result == [0]
    assert current_driver(cfg, "wordcount") is None  # the driver process is gone


def test_restart_budget_doubles_the_delay_and_forgets_old_crashes():
    budget = RestartBudget(DriversConfig(restart_delay_s=1, max_restart_delay_s=3, max_restarts=3,
                                         restart_window_s=100))
    assert [budget.next_delay_s(t) for t in (0, 1, 2)] == [1, 2, 3]
    assert budget.next_delay_s(3) is None  # a 4th crash within 100 s
    assert budget.next_delay_s(150) == 1  # the old crashes left the window


def test_drivers_config_refuses_a_unit_without_the_app():
    with pytest.raises(ValueError, match="unit name"):
        DriversConfig(systemd_unit="sparkscale-app.service")
    assert DriversConfig().unit("wc") == "sparkscale-app@wc.service"


def test_after_a_crash_a_failed_relaunch_is_retried_within_the_budget(env, monkeypatch):
    _cfg, run, _launched, runs = env
    real = supervisor_mod.launch_driver
    calls = {"n": 0}

    def flaky(*args):
        calls["n"] += 1
        if calls["n"] == 2:  # the relaunch after the crash: Redis is away
            raise ConnectionError("redis down")
        return real(*args)

    monkeypatch.setattr(supervisor_mod, "launch_driver", flaky)
    # The 1st run crashes after starting; its relaunch fails (retried: it follows a crash); the next ends normally.
    assert run([{"start": True, "code": 1}, {"start": True, "code": 0}]) == 0
    assert calls["n"] == 3 and runs.read_text() == "2"


def test_after_a_crash_a_relaunch_that_fails_before_starting_is_retried(env):
    _cfg, run, _launched, runs = env
    assert run([{"start": True, "code": 1}, {"start": False, "code": 1}, {"start": True, "code": 0}]) == 0
    assert runs.read_text() == "3"
