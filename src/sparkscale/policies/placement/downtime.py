"""How long an app stalls when its executors change: EDRP's t_D (Cardellini et al., Appendix A.1)
for Spark standalone. Pure.

Why a model of its own: EDRP weighs a better deployment against the downtime of reaching it
(eq. 12), so each action kind needs a duration. The paper's pause-and-resume protocol moves state
through a DataStore. In Spark the checkpoint plays that part, and sparkscale changes counts without
a stop:
- an addition is make-before-break: nothing leaves, so eq. (31)'s scale-out redistribution term
  falls away. It still stalls: the bench measured a batch 9-11 s longer after each scale-up (the
  new executor's first tasks, state partitions it takes over included), which `executor_add_s`
  holds (eq. (27)'s t_s);
- a removal is a graceful decommission (`executor_remove_s`, measured 0 beyond t_syn). The state
  partitions it held are reloaded from the checkpoint by whichever executors take them: eq. (31)'s
  "otherwise" case, I_S * delta-_u / |U|, at `reload_bytes_per_s`;
- a whole query restart (`restart_s`) only happens when partitions change too (DCR/CCR). That is
  eq. (33)'s t_{D,R}, used only on request (`restart=True`).

Eq. (26) takes the max over transfers between node pairs, because they run in parallel. Here that
becomes the max over source workers: each worker decommissions its own executors at the same time.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from pydantic import Field

from sparkscale.config.base import ConfigSection
from sparkscale.policies.placement.model import AppDemand

MEASURED_KINDS = ("sync", "executor_add", "executor_remove", "restart")


class DowntimeModel(ConfigSection):
    """Seconds of stall per action kind. The defaults, measured by `sparkscale bench placement`
    (docs/results/placement), hold until this cluster has measured its own (`from_measured`)."""

    sync_s: float = Field(1.0, ge=0.0, description=(  # t_syn
        "Daemon-agent round trip plus the action's confirmation, in seconds."))
    executor_add_s: float = Field(9.0, ge=0.0, description=(  # the bench: 9-11 s, t_syn included
        "Stall of a batch after an executor is added, in seconds."))
    executor_remove_s: float = Field(0.0, ge=0.0, description=(  # the bench: 0.4-0.5 s, below t_syn
        "Stall after an executor is removed, beyond sync_s, in seconds."))
    reload_bytes_per_s: float = Field(50e6, gt=0.0, description=(
        "Rate at which state is reloaded from the checkpoint, in bytes/s."))
    restart_s: float = Field(20.0, ge=0.0, description=(
        "Stop and restart of a query (a partition change), in seconds."))


def action_kind(now: Mapping[str, int], target: Mapping[str, int]) -> str:
    """EDRP eq. (25): "none", "migration", "scale-out" or "scale-in". The paper prints the SO and SI
    conditions swapped; scale-out here means |V| > |U|, as eq. (31) needs."""
    workers = set(now) | set(target)
    if all(now.get(w, 0) == target.get(w, 0) for w in workers):
        return "none"
    n0, n1 = sum(now.values()), sum(target.values())
    return "migration" if n0 == n1 else ("scale-out" if n1 > n0 else "scale-in")


def action_downtime_s(app: AppDemand, now: Mapping[str, int], target: Mapping[str, int],
                      model: DowntimeModel, *, restart: bool = False) -> float:
    """t_D(i, U0, V) for `app` going from `now` to `target` (worker -> executor count).

    0 when nothing changes. Otherwise t_syn, plus `executor_add_s` when anything is added, plus the
    slowest source worker: `executor_remove_s` plus the reload of its removed executors' share of
    the state. `restart=True` gives eq. (33): at least t_syn + `restart_s`.
    """
    if action_kind(now, target) == "none":
        return 0.0  # EDRP eq. (25), U = V
    n0 = sum(now.values())
    workers = set(now) | set(target)
    added = any(target.get(w, 0) > now.get(w, 0) for w in workers)
    slowest = 0.0
    for w in workers:
        removed = max(now.get(w, 0) - target.get(w, 0), 0)  # delta-_u
        if removed:
            state = app.state_bytes * removed / n0  # EDRP eq. (31), "otherwise": I_S * delta-_u / |U|
            slowest = max(slowest, model.executor_remove_s + state / model.reload_bytes_per_s)  # eq. (26)-(29)
    t_d = model.sync_s + (model.executor_add_s if added else 0.0) + slowest  # EDRP eq. (25)-(27)
    if restart:
        t_d = max(t_d, model.sync_s + model.restart_s)  # EDRP eq. (33), (39)
    return t_d


def from_measured(samples: Mapping[str, Sequence[float]], base: DowntimeModel | None = None) -> DowntimeModel:
    """`base` (default: the defaults) with the median of each measured kind in place of its default.

    `samples` maps a kind to seconds of stall measured for one action of that kind. Kinds:
    "executor_add", "executor_remove" (the decommission alone, without the state reload, e.g.
    measured on a stateless app), "restart" and "sync". A kind with no samples keeps its value.
    The median is used because one slow batch should not set the model.
    """
    unknown = sorted(set(samples) - set(MEASURED_KINDS))
    if unknown:
        raise ValueError(f"unknown downtime kind(s) {', '.join(unknown)}; expected {', '.join(MEASURED_KINDS)}")
    values = (base or DowntimeModel()).model_dump()
    for kind, seconds in samples.items():
        if seconds:
            values[f"{kind}_s"] = float(statistics.median(seconds))
    return DowntimeModel(**values)  # validates: a negative median is refused
