"""The chaos run, short: `sparkscale bench chaos --quick` with one fault (Redis restarted) on one
embedded environment of its own (free ports, a temp dir), on a fresh wordcount app under load with
the daemon running. It must recover to 90 % of its pre-fault throughput, and the verifier must find
nothing lost or duplicated. About 3.5 minutes on 2 cores.

The driver SIGKILL is the benchmark's (`sparkscale bench chaos`, every fault): in the suite it is
test_pipelines.py's driver crash (nothing lost or duplicated across it) and test_daemon.py's
SIGKILL of the leading daemon; running it here too cost 3.5 minutes of a suite near its budget."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

FAULTS = ("redis_restart",)
RUN_KEYS = {"fault", "recovery_s", "recovered", "lost", "duplicated", "pre_fault_rps", "daemon_actions", "notes"}


# About 3.5 minutes (submit, settle, 40 s of load, the fault, recovery, drain, verify).
@pytest.mark.timeout(900)
def test_quick_chaos_run_recovers_from_each_fault_without_loss(tmp_path):
    out = tmp_path / "chaos"
    done = subprocess.run(
        [sys.executable, "-m", "sparkscale", "bench", "chaos", "--quick", "--faults", ",".join(FAULTS),
         "--rate", "500", "--out", str(out)],
        capture_output=True, text=True, timeout=800, check=False)
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
    assert "redis stopped (SIGTERM" in " ".join(results["runs"][0]["notes"])
    assert done.returncode == 0, story
    assert "| redis_restart | yes |" in (out / "results.md").read_text()
