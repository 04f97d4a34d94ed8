"""Hypothesis strategies for random valid instances of every persisted or sent record (for
test_model_roundtrip.py): each within the bounds its reader checks, so that reading back what was
written must give the same record."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import strategies as st

from sparkscale.daemon.action_log import BlocklistEntry, DecisionMode, DecisionRecord, LoggedDecision, OutcomeRecord
from sparkscale.daemon.manual import ManualRequest, ManualResult, RequestType
from sparkscale.daemon.status import AppStatus, QueryView, Role
from sparkscale.model.action_result import ActionResult
from sparkscale.model.journal import Journal, JournalStatus, Phase
from sparkscale.model.plan import Action, ActionType, ExpectedOutcome, Observation, Plan
from sparkscale.model.snapshot import ExecutorFigures, InstanceFigures, OperatorFigures, Snapshot
from sparkscale.policies.history import DecisionHistory, PastDecision, ScalingObservation
from sparkscale.policies.outcomes import BlockedAction, Blocklist, Expectation
from sparkscale.protocol.commands import Ack, Command
from sparkscale.protocol.queries import QueryInfo, SourceReport

names = st.text(string.ascii_letters + string.digits + "_.-", min_size=1, max_size=12)
app_names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,11}", fullmatch=True)  # config.apps.app_name_problem
texts = st.text(max_size=12)
times = st.floats(0, 1e10, allow_nan=False)
counts = st.integers(0, 1000)
finite = st.floats(-1e12, 1e12, allow_nan=False)
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | finite | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=6)
json_objects = st.dictionaries(texts, json_values, max_size=3)


def amounts(high: float) -> st.SearchStrategy[float]:
    """0, or a record count or duration of at least 1e-6 (snapshot.SMALLEST), up to `high`."""
    return st.just(0) | st.integers(1, int(high)) | st.floats(1e-6, high)


def extra(known: set[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Keys a newer writer added: kept and written back."""
    return st.dictionaries(names.filter(lambda k: k not in known), json_values, max_size=2)


# -- snapshot -------------------------------------------------------------------------------------

executors = st.builds(ExecutorFigures, names, names, st.integers(1, 64),
                      extra({"id", "host", "cores"}))
instances = st.builds(InstanceFigures, amounts(1e15), amounts(1e15), amounts(1e9), names | st.none(),
                      extra({"records_in", "records_out", "useful_time_s", "executor"}))
OPERATOR_KEYS = {"id", "source", "parallelism", "arrival_rate", "backlog", "backlog_known", "instances"}


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    ids = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    sources = draw(st.integers(1, len(ids)))  # the first ones; the rest may be downstream of any before
    operators = [OperatorFigures(
        op, draw(st.integers(1, 100_000)), tuple(draw(st.lists(instances, max_size=2))), i < sources,
        draw(st.floats(0, 1e12)) if i < sources else draw(st.none() | st.floats(0, 1e12)),
        draw(st.none() | st.floats(0, 1e15)), draw(extra(OPERATOR_KEYS))) for i, op in enumerate(ids)]
    edges = [(ids[a], ids[b]) for b in range(sources, len(ids)) for a in range(b) if draw(st.booleans())]
    extensions = draw(st.fixed_dictionaries({}, optional={
        "app": st.fixed_dictionaries({"cpu_fraction": st.floats(0, 1)}, optional={
            "requested_executors": st.integers(0, 100)}),
        "host_cpu": json_objects}))
    return Snapshot(
        draw(app_names), draw(names), draw(finite), draw(st.floats(1e-6, 1e9)),
        tuple(draw(st.lists(executors, max_size=3, unique_by=lambda e: e.id))), tuple(operators), tuple(edges),
        draw(st.none() | st.floats(1e-6, 1e9)), draw(st.none() | amounts(1e9)), extensions,
        draw(extra({"version", "app", "query", "taken_at", "window_s", "trigger_interval_s", "batch_duration_s",
                    "executors", "operators", "edges", "extensions"})))


# -- plan, history ---------------------------------------------------------------------------------


@st.composite
def actions(draw: st.DrawFn) -> Action:
    kind = draw(st.sampled_from(ActionType))
    reason = draw(names)
    query = draw(st.none() | names)
    if kind == ActionType.SCALE_EXECUTORS:
        from_, to = draw(counts), draw(counts)
        named = draw(st.lists(names, min_size=from_ - to, max_size=from_ - to, unique=True)) if 0 < from_ - to < 5 \
            else []
        return Action(kind, from_=from_, to=to, reason=reason, query=query, executors=tuple(named))
    if kind == ActionType.SET_PARALLELISM:
        return Action(kind, draw(names), from_=draw(st.integers(1, 4096)), to=draw(st.integers(1, 4096)),
                      reason=reason, query=query)
    if kind == ActionType.REPLACE_EXECUTOR:
        return Action(kind, executor=draw(names), reason=reason, query=query)
    if kind == ActionType.SET_EXECUTOR_MEMORY:
        memory_mb = st.integers(256, 1 << 22)
        return Action.set_executor_memory(draw(names), draw(memory_mb), draw(memory_mb), reason)
    return Action(kind, operator=draw(st.none() | names), reason=reason, query=query)


rounded = st.floats(-1e6, 1e6).map(lambda x: round(x, 6))  # ExpectedOutcome is written rounded
expected_outcomes = st.builds(ExpectedOutcome, names, st.sampled_from(ActionType), names, rounded, rounded)
observations = st.builds(Observation, st.none() | names, st.dictionaries(names, st.none() | finite, max_size=3),
                         st.none() | texts, st.none() | expected_outcomes, st.none() | counts)
plans = st.builds(Plan, names, names, st.dictionaries(names, st.integers(1, 4096), max_size=3),
                  st.lists(actions(), max_size=3).map(tuple), st.lists(texts, max_size=2).map(tuple), observations)
blocked = st.builds(BlockedAction, names, names, st.sampled_from(ActionType), times, st.none() | names)
scaling = st.builds(ScalingObservation, st.none() | names, times, counts, counts, *[st.floats(0, 1e12)] * 3)


@st.composite
def histories(draw: st.DrawFn) -> DecisionHistory:
    decided = sorted(draw(st.lists(times, max_size=3)))
    return DecisionHistory(
        tuple(PastDecision(t, draw(plans)) for t in decided), Blocklist(tuple(draw(st.lists(blocked, max_size=2)))),
        draw(st.none() | times), draw(st.booleans()), draw(st.none() | times),
        draw(st.dictionaries(names, st.integers(1, 4096), max_size=2)), draw(st.none() | counts),
        draw(st.none() | st.integers(-1, 1)), draw(st.none() | texts), tuple(draw(st.lists(scaling, max_size=2))),
        draw(st.integers(0, 10**6)))


# -- journal ---------------------------------------------------------------------------------------

phases = st.sampled_from(Phase)
steps = st.fixed_dictionaries({"step": names, "began_at": times}, optional={
    "at": times, "ok": st.booleans(), "detail": json_values, "error": texts})
attempts = st.fixed_dictionaries({"way": st.sampled_from(["forward", "back"]), "partitions": st.integers(1, 4096),
                                  "steps": st.lists(steps, max_size=2)}, optional={"error": texts})
recoveries = st.fixed_dictionaries({
    "goal": st.sampled_from(["recover", "abort"]), "reason": texts, "at": phases, "phase_reached": st.none() | phases,
    "state_moved": st.booleans(), "began_at": times, "epoch": counts, "attempts": st.lists(attempts, max_size=2)},
    optional={"skipped": st.dictionaries(names, texts, max_size=2), "sources_resumed": st.booleans(),
              "ended_at": times})
takeovers = st.fixed_dictionaries({"epoch": counts, "at": times, "phase": phases,
                                   "status": st.sampled_from(JournalStatus)})
metric = st.none() | st.integers(0, 10**9) | finite | texts
marks = st.fixed_dictionaries({}, optional={
    "input_at_request": st.none() | counts, "input_at_pause": st.none() | counts,
    "input_at_restart": st.none() | counts, "input_at_resume": st.none() | counts,
    "run_id_at_request": st.none() | names, "run_id": st.none() | names, "drain": texts,
    "stop": st.fixed_dictionaries({}, optional={"stopped": st.booleans(), "waited_s": times,
                                                "inside_batch": st.booleans(), "notes": st.lists(texts, max_size=2),
                                                "last_batch_id": st.none() | counts}),
    "replayed_records": counts, "captured_records": st.none() | counts, "captured_in_flight_records": counts,
    "repartition": st.just("unchanged") | json_objects, "restart": json_values, "app_restart_started_at": times,
    "app_restarted_at": times, "shape": st.fixed_dictionaries({"executor_cores": st.integers(1, 16),
                                                               "executor_memory_mb": st.integers(512, 8192)}),
    "idle_since": times, "first_output_at": times, "first_output": texts, "recovery": recoveries,
    "recoveries": st.lists(recoveries, max_size=1), "resumed_by": st.lists(takeovers, max_size=2),
    "aborted_by": takeovers, "metrics": st.dictionaries(names, metric, max_size=3),
    "follow_up": st.fixed_dictionaries({"status": st.sampled_from(["pending", "measured"])},
                                       optional={"measured_at": times})})
journals = st.builds(Journal, names, names, names, st.sampled_from(["dsm", "dcr", "ccr"]), st.integers(1, 4096),
                     st.integers(1, 4096), times, names, counts, st.sampled_from(JournalStatus), phases,
                     st.dictionaries(phases, times, max_size=4), marks, texts,
                     st.none() | st.just({"executor_cores": 2, "executor_memory_mb": 1024}))

# -- agent protocol ----------------------------------------------------------------------------------

commands = st.builds(Command, names, json_objects, counts, times, st.just(""), st.none() | times)
acks = st.builds(Ack, st.booleans(), json_values, times)
source_reports = st.builds(
    SourceReport, texts, names, counts, st.none() | finite, st.none() | finite, json_values, json_values,
    json_values, st.dictionaries(names, texts, max_size=2), st.none() | counts, st.none() | counts,
    st.sampled_from(["source_offsets", "file_listing", "unknown"]), texts, st.none() | counts,
    st.sampled_from(["records", "files"]))
query_infos = st.builds(
    QueryInfo, names, names, names, st.sampled_from(["active", "held", "terminated"]), st.none() | texts,
    st.booleans(), st.booleans(), st.booleans(), st.lists(names, max_size=2).map(tuple),
    st.none() | st.integers(1, 4096), st.none() | times, st.none() | names, times, st.none() | texts,
    st.lists(texts, max_size=2).map(tuple), st.booleans(), st.booleans())

# -- action log, status, manual requests -------------------------------------------------------------

expectations = st.builds(Expectation, names, st.sampled_from(ActionType), names, finite, finite, finite)
decision_records = st.builds(DecisionRecord, names, times, texts, texts, st.none() | counts, names,
                             st.none() | names, plans, st.sampled_from(DecisionMode), st.none() | expectations)
outcomes = st.builds(OutcomeRecord, names, names, times, st.booleans(), names, finite, finite, st.none() | finite,
                     texts, st.none() | times)
results = st.builds(ActionResult, actions(), st.sampled_from(["done", "failed", "skipped"]), texts,
                    st.none() | names, st.none() | times, st.none() | times, st.none() | counts,
                    st.none() | json_objects)
logged = st.builds(LoggedDecision, names, decision_records, st.none() | st.lists(results, max_size=2).map(tuple),
                   st.none() | outcomes, st.none() | times)
blocklist_entries = st.builds(BlocklistEntry, blocked, times, texts, texts)
query_views = st.builds(QueryView, names, st.none() | finite, names, st.none() | finite, names,
                        st.none() | st.integers(1, 4096))
statuses = st.builds(AppStatus, names, st.sampled_from(Role), st.none() | counts, times,
                     st.sampled_from(["ok", "absent", "unreachable", "error"]), st.none() | counts,
                     st.dictionaries(names, st.integers(1, 4096), max_size=2), st.none() | texts, st.none() | times,
                     st.none() | texts, st.none() | times, texts, st.lists(query_views, max_size=2).map(tuple),
                     st.lists(texts, max_size=2).map(tuple))


@st.composite
def requests(draw: st.DrawFn) -> ManualRequest:
    kind = draw(st.sampled_from(RequestType))
    to = draw(counts) if kind == RequestType.SCALE_EXECUTORS else draw(st.none() | counts)
    return ManualRequest(to, draw(texts), draw(times), draw(times), "", kind, draw(st.none() | names),
                         draw(st.none() | names), draw(st.none() | counts),
                         draw(st.none() | st.just({"executor_cores": 2, "executor_memory_mb": 1024})),
                         draw(names) if kind in (RequestType.RESUME_MIGRATION, RequestType.ABORT_MIGRATION)
                         else draw(st.none() | names))


manual_results = st.builds(ManualResult, st.booleans(), texts, st.none() | names, st.none() | names)
