"""The main job, short: `sparkscale demo` on the shipped config (DS2 with the product's defaults)
drives wordcount through low -> high -> low load. Its summary must show a step up after the load
rose and a step down after it fell, each with its reason, and every record verified exactly once;
the action log holds each executed decision with its reason and, in time, its outcome.

One of the suite's longest tests. A fixed load failed in CI twice: at 8,000 lines/s one executor kept up
on a quiet machine (no step up); at 20,000 a slower machine never drained the backlog (no step down).
The demo now sizes its load to what one executor processed after its warm-up (bench/demo.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkscale.cli import main
from sparkscale.config import load_config
from sparkscale.daemon.action_log import ActionLog
from sparkscale.redisconn import connect

pytestmark = pytest.mark.integration

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "sparkscale.yaml"
MINUTES = 2.0  # low 24 s, high 36 s, low 60 s: room for the drain and the 20 s scale-down delay
ACTION = re.compile(r"^\s+t=\s*([\d.]+) s\s+scale_executors (\d+) -> (\d+)\s+done\s+\((.+)\)$")


def test_the_demo_steps_up_after_the_load_rises_and_down_after_it_falls(embedded_env, tmp_path):
    sets = [x for s in embedded_env.overrides for x in ("--set", s)]
    out = CliRunner().invoke(main, ["demo", "--config", str(SHIPPED), *sets, "--minutes", str(MINUTES),
                                    "--out", str(tmp_path)])
    summary = out.output[out.output.index("=== summary ==="):] if "=== summary ===" in out.output else out.output
    assert out.exit_code == 0, out.output[-4000:]
    matches = [ACTION.match(line) for line in summary.splitlines()]
    actions = [(float(m[1]), int(m[2]), int(m[3]), m[4]) for m in matches if m]
    high_from, low_from = round(MINUTES * 60 * 0.2), round(MINUTES * 60 * 0.2) + round(MINUTES * 60 * 0.3)
    ups = [a for a in actions if a[2] > a[1]]
    downs = [a for a in actions if a[2] < a[1]]
    assert ups and ups[0][0] > high_from, summary  # the first step up answers the step up...
    assert downs and downs[-1][0] > low_from and downs[-1][0] > ups[0][0], summary  # ...and one down, the fall
    assert all(why for *_rest, why in actions), summary  # each explained in its line
    assert "lost 0, duplicated 0" in summary, summary
    assert (tmp_path / "demo-timeline.png").stat().st_size > 0
    figures = json.loads((tmp_path / "demo.json").read_text())
    assert (figures["lost"], figures["duplicated"]) == (0, 0)
    # The action log: every executed decision with the daemon's reason, and the scale-ups' outcomes
    # (the daemon stops with the load, before the last step down's outcome is due).
    cfg = load_config(SHIPPED, embedded_env.overrides)
    log = ActionLog(connect(cfg.redis), cfg.redis.key_prefix)

    def executed(direction: int):
        return [d for d in log.read("wordcount") if d.decision.daemon == "demo" for r in d.results or ()
                if r.status == "done" and r.action.type == "scale_executors"
                and (r.action.to > r.action.from_) == (direction > 0)]

    assert len(executed(1)) == len(ups) and len(executed(-1)) == len(downs)
    assert all(d.decision.policy == "ds2" and d.decision.plan.actions[0].reason for d in executed(1) + executed(-1))
    assert all(d.outcome is not None for d in executed(1)), "a scale-up's outcome was not judged"
