"""The chaos run, short: `sparkscale bench chaos --quick` with two faults (the driver SIGKILLed, Redis
restarted) on one embedded environment of its own (free ports, a temp dir), each on a fresh
wordcount app under load with the daemon running. Each must recover to 90 % of its pre-fault
throughput, and the verifier must find nothing lost or duplicated. About 7 minutes on 2 cores."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

FAULTS = ("driver_kill", "redis_restart")
RUN_KEYS = {"fault", "recovery_s", "recovered", "lost", "duplicated", "pre_fault_rps", "daemon_actions", "notes"}


# Two faults of about 3.5 minutes each (submit, settle, 40 s of load, the fault, recovery, drain, verify):
# more than the suite's 900 s per test would allow if the machine is slow.
@pytest.mark.timeout(1500)
def test_quick_chaos_run_recovers_from_each_fault_without_loss(tmp_path):
    out = tmp_path / "chaos"
    done = subprocess.run(
        [sys.executable, "-m", "sparkscale", "bench", "chaos", "--quick", "--faults", ",".join(FAULTS),
         "--rate", "500", "--out", str(out)],
        capture_output=True, text=True, timeout=1400, check=False)
    results = json.loads((out / "results.json").read_text())
    story = f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert results["failed_runs"] == [], story
    assert [r["fault"] for r in results["runs"]] == list(FAULTS), story
    for run in results["runs"]:
        assert run.keys() >= RUN_KEYS, run.keys()
        summary = {k: run[k] for k in RUN_KEYS}
        assert run["recovered"] and run["recovery_s"] is not None, summary
        assert run["pre_fault_rps"] > 0, summary
        assert (run["lost"], run["duplicated"], run["unexpected"]) == (0, 0, 0), summary
        assert run["daemon_actions"], summary  # the daemon's cycles at least
        assert (out / f"timeline-{run['fault']}.png").exists()
    assert "SIGKILL of the driver" in " ".join(results["runs"][0]["notes"])
    assert "redis stopped (SIGTERM" in " ".join(results["runs"][1]["notes"])
    assert done.returncode == 0, story
    assert "| driver_kill | yes |" in (out / "results.md").read_text()
