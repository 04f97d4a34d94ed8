"""Guard: ineffective scaling (`guards.ineffective_scale_up_fraction`): no further scale-up of a
query whose last judged scale-up brought less than that fraction of the capacity gain expected of
it (Flink's autoscaler, FLINK-30571: scaling effectiveness detection).

More executors did not help last time (a bottleneck outside the cores: the source, a skewed key,
an external store), so asking for more at the same load would not either. The hold ends when the
load changes (the arrival rate moved by more than `guards.ineffective_load_change` since that
scale-up was judged: the bottleneck may be elsewhere now) or `guards.ineffective_hold_s` after the
judgement. The judged scale-ups are the history's (`DecisionHistory.scalability`, recorded by the
daemon from policies/outcomes.py's verdicts); their observed gain ratio goes into each plan's
figures (`SCALABILITY_FIGURE`), for metrics and `sparkscale explain`, and DS2 sizes its next
scale-up with the coefficient learnt from them (policies/scalability.py). This guard records the
arrival rate in every plan (`ARRIVAL_FIGURE`), the reference the next decisions compare with. Pure.
"""

from __future__ import annotations

from sparkscale.config import GuardsConfig
from sparkscale.model.plan import Action
from sparkscale.policies.figures import load_figures
from sparkscale.policies.guard_input import GuardInput, replace_scale, scale
from sparkscale.policies.history import DecisionHistory, ScalingObservation

ARRIVAL_FIGURE = "guard_arrival_rps"  # records/s arriving at the sources when the decision was made
SCALABILITY_FIGURE = "observed_scalability"  # the last judged scale-up's share of its expected gain


def last_judged(history: DecisionHistory, query: str | None) -> ScalingObservation | None:
    """The newest judged scale-up of `query` (observations without a query count for every one)."""
    return next((o for o in reversed(history.scalability) if query is None or o.query in (None, query)), None)


def arrival_at(history: DecisionHistory, at: float) -> float | None:
    """The arrival rate this guard recorded in the newest decision made at or before `at`, else in
    the oldest after it (None: none recorded)."""
    recorded = [(d.decided_at, d.observation.figure(ARRIVAL_FIGURE)) for d in history]
    known = [(when, float(value)) for when, value in recorded if value is not None]
    before = [rate for when, rate in known if when <= at]
    if before:
        return before[-1]
    return known[0][1] if known else None


def ineffective_scaling(actions: list[Action], given: GuardInput, guards: GuardsConfig, notes: list[str],
                        figures: dict[str, float]) -> list[Action]:
    """`actions` without a scale-up held for ineffective scaling (and a warning saying why); records
    the arrival rate and the observed scalability in `figures`."""
    fraction = guards.ineffective_scale_up_fraction
    if fraction is None:
        return actions
    arrival = load_figures(given.snapshot, given.app).arrival_rate
    figures[ARRIVAL_FIGURE] = arrival
    last = last_judged(given.history, given.snapshot.query)
    ratio = last.gain_ratio if last is not None else None
    if last is None or ratio is None:
        return actions
    figures[SCALABILITY_FIGURE] = round(ratio, 6)
    action = scale(actions)
    if ratio >= fraction or action is None or action.executor_direction <= 0:
        return actions
    judged = f"the last scale-up ({last.cores_before} -> {last.cores_after} cores) brought {ratio:.2f} of the " \
             f"capacity gain expected (under {fraction:g})"
    age_s = given.now - last.at
    if age_s >= guards.ineffective_hold_s:
        notes.append(f"guard ineffective scaling: {judged}, {age_s:g} s ago: the {guards.ineffective_hold_s:g} s "
                     "hold is over")
        return actions
    before = arrival_at(given.history, last.at)
    change = guards.ineffective_load_change
    if before is not None and (abs(arrival - before) > change * before if before > 0 else arrival > 0):
        notes.append(f"guard ineffective scaling: {judged}, but the arrival rate moved {before:g} -> {arrival:g} "
                     f"rec/s (more than {change:.0%}): scale-up kept")
        return actions
    load = (f"the arrival rate moves by more than {change:.0%} from {before:g} rec/s" if before is not None
            else "the load changes")
    why = (f"ineffective scaling: {judged}; scale-ups of query {last.query or given.snapshot.query} held until "
           f"{load} or for {guards.ineffective_hold_s - age_s:g} s more")
    notes.append(f"guard ineffective scaling: {action.summary()} held: {why}")
    return [*replace_scale(actions, None), Action.warn(why)]
