"""Bounded input (issue 32): each probe that reached a traceback or a hang is now exit 2 with a
message naming the file, the key and the problem. Huge integers (5,001 digits: Python's int()
refuses more than 4,300), FIFOs and devices given as files, files above the size caps, control
characters in messages, impossible `cluster-plan` workers and unbounded `simulate` runs; then
property tests: cluster-plan and simulate inputs are accepted or refused with exit 2, nothing else."""

from __future__ import annotations

import json
import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sparkscale.bounded import CONFIG_MAX_BYTES, DATA_MAX_BYTES, MAX_INTEGER_DIGITS, printable, read_user_file
from sparkscale.cli import main
from sparkscale.config import ConfigError, load_config
from sparkscale.config.problems import ConfigProblem
from sparkscale.model.fields import FieldError, parse_json
from sparkscale_lab.pipelines.profiles import parse_profile

FIXTURE = Path(__file__).parent / "fixtures" / "design_snapshot.json"
HUGE = "1" * 5001  # the probe: Python refuses int() of more than 4,300 digits
CONTROL = ("\x1b", "\r", "\x00", "\x07", "\u202e")

PROPERTY = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class Hung(Exception):
    """The alarm of `no_hang`: a read blocked (a FIFO opened for reading waits for a writer)."""


@pytest.fixture
def no_hang() -> Iterator[None]:
    """Fail instead of hanging if a fix regresses: SIGALRM interrupts a blocked open() or read()."""

    def alarm(_signum: int, _frame: object) -> None:
        raise Hung("blocked for 20 s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def invoke(*args: str) -> Result:
    return CliRunner(env={"SPARKSCALE_CONFIG": None}).invoke(main, list(args))


def refused(result: Result, *fragments: str) -> str:
    """An exit-2 refusal holding every fragment, with no traceback and no raw control character."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in result.output, result.output
    assert not any(c in result.output for c in CONTROL), repr(result.output)
    return result.output


def snapshot_text(change: Any = None) -> str:
    data = json.loads(FIXTURE.read_text())
    if change is not None:
        change(data)
    return json.dumps(data)


# -- 1. integers of 5,001 digits ----------------------------------------------------------------------


def test_a_huge_integer_in_a_config_file_names_the_file_and_the_key(tmp_path):
    # Was a ValueError traceback from inside PyYAML's int constructor (exit 1).
    path = tmp_path / "c.yaml"
    for text, key in [(f"loop:\n  window_s: {HUGE}\n", "loop.window_s"),
                      (f"apps:\n  - name: a\n    max_executors: {HUGE}\n", "apps.0.max_executors"),
                      (f"loop:\n  window_s: 0x{'f' * 5001}\n", "loop.window_s")]:  # int() of base 16 is no limit
        path.write_text(text)
        for args in (["check-config", str(path)], ["plan", str(FIXTURE), "--config", str(path)]):
            refused(invoke(*args), f"invalid config: {path}: {key}: an integer of 5001 digits (at most 1000)")


def test_a_huge_integer_in_a_set_value_names_the_key():
    # Was a ValueError traceback; a hexadecimal one was a ValueError from the message's repr().
    for override, key in [(f"loop.window_s={HUGE}", "loop.window_s"),
                          (f"apps=[{{name: a, max_executors: {HUGE}}}]", "apps.0.max_executors"),
                          (f"loop.window_s=0x{'f' * 900}", "loop.window_s")]:
        out = refused(invoke("plan", str(FIXTURE), "--set", override), f"invalid config: --set: {key}: ")
        assert "an integer of" in out and "(at most 1000)" in out
    with pytest.raises(ConfigError, match=r"--set: loop.window_s: an integer of 5001 digits"):
        load_config(None, [f"loop.window_s={HUGE}"])


def test_the_search_for_a_huge_integer_visits_each_yaml_alias_once(tmp_path, no_hang):
    # A "billion laughs" document (10^9 leaves through aliases) and a recursive alias: the search
    # for the too long integer's key walks distinct nodes only, so it ends at once.
    text = "a: &a [" + ",".join(["1"] * 10) + "]\n"
    for level in range(1, 9):
        text += f"b{level}: &b{level} [" + ",".join([f"*{'a' if level == 1 else f'b{level - 1}'}"] * 10) + "]\n"
    path = tmp_path / "laughs.yaml"
    path.write_text(text + "r: &r [*r]\nh: " + HUGE + "\n")
    with pytest.raises(ConfigError, match=r"laughs.yaml: h: an integer of 5001 digits"):
        load_config(path)


def test_an_integer_within_the_digit_limit_reaches_the_range_check_and_is_shown_short():
    with pytest.raises(ConfigError) as caught:
        load_config(None, [f"apps.0.max_executors={'9' * MAX_INTEGER_DIGITS}"])
    assert str(caught.value) == ("--set: apps.0.max_executors: expected less than or equal to 1000000 "
                                 f"(app 'wordcount') (got an integer of {MAX_INTEGER_DIGITS} digits)")


def test_a_huge_integer_in_a_snapshot_or_history_names_the_field(tmp_path):
    # Was a ValueError traceback from json's scanner (exit 1) in plan, plan --history and cluster-plan.
    snapshot = tmp_path / "s.json"
    snapshot.write_text(snapshot_text().replace('"taken_at": 1795300000.0', f'"taken_at": {HUGE}'))
    problem = f"taken_at: an integer of 5001 digits (at most {MAX_INTEGER_DIGITS})"
    refused(invoke("plan", str(snapshot)), f"invalid snapshot: {snapshot}: {problem}")
    refused(invoke("cluster-plan", str(snapshot)), f"invalid snapshot: {snapshot}: {problem}")
    history = tmp_path / "h.json"
    history.write_text('{"version": 1, "decisions": [], "partitions": {"counts": ' + HUGE + "}}")
    refused(invoke("plan", str(FIXTURE), "--history", str(history)),
            f"invalid history: {history}: partitions.counts: an integer of 5001 digits")
    with pytest.raises(FieldError, match=r"^\[2\]\.x: an integer of 5001 digits"):
        parse_json('[1, 2, {"x": -' + HUGE + "}]")


# -- 2. FIFOs, devices and files above the size caps -------------------------------------------------


def test_a_fifo_is_refused_as_config_snapshot_history_or_cluster_plan_input(tmp_path, no_hang):
    # Each of these hung: the reader waited for a writer that never came.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused(invoke("check-config", str(fifo)), f"invalid config: {fifo}: is a FIFO, not a regular file")
    refused(invoke("plan", str(FIXTURE), "--config", str(fifo)), f"invalid config: {fifo}: is a FIFO")
    refused(invoke("plan", str(fifo)), f"invalid snapshot: {fifo}: is a FIFO, not a regular file")
    refused(invoke("plan", str(FIXTURE), "--history", str(fifo)), f"invalid history: {fifo}: is a FIFO")
    refused(invoke("cluster-plan", str(fifo)), f"invalid snapshot: {fifo}: is a FIFO")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_dev_zero_is_refused_not_read_until_memory_runs_out(no_hang):
    # Was a MemoryError after reading for as long as memory lasted.
    refused(invoke("check-config", "/dev/zero"), "invalid config: /dev/zero: is a character device, not a regular")
    refused(invoke("plan", "/dev/zero"), "invalid snapshot: /dev/zero: is a character device")


def test_files_above_the_size_caps_are_refused_naming_the_cap(tmp_path):
    config, snapshot = tmp_path / "big.yaml", tmp_path / "big.json"
    with open(config, "wb") as f:  # sparse: no disk space taken
        f.truncate(CONFIG_MAX_BYTES + 1)
    with open(snapshot, "wb") as f:
        f.truncate(DATA_MAX_BYTES + 1)
    refused(invoke("check-config", str(config)), f"invalid config: {config}: is {CONFIG_MAX_BYTES + 1} bytes, "
                                                 "above the 16 MiB cap for a config file")
    refused(invoke("plan", str(snapshot)), f"invalid snapshot: {snapshot}: is {DATA_MAX_BYTES + 1} bytes, "
                                           "above the 64 MiB cap for a snapshot or history file")
    small = tmp_path / "small"
    small.write_bytes(b"12345")
    assert read_user_file(small, 5) == b"12345"
    with pytest.raises(ValueError, match="above the 4 bytes cap for a file"):
        read_user_file(small, 4)


# -- 3. control characters in messages ---------------------------------------------------------------


def test_control_characters_in_user_text_are_escaped_in_messages(tmp_path):
    # Were printed raw: a key or file name could recolour, overwrite or hide the operator's terminal lines.
    out = refused(invoke("plan", str(FIXTURE), "--set", "\x1b[31mloop.x=1"))
    assert "--set: \\x1b[31mloop: unknown key" in out
    config = tmp_path / "c.yaml"
    config.write_text('loop:\n  "\\e[2Jx\\r\\0": 1\n')  # YAML escapes: ESC, CR, NUL in a key
    assert "loop.\\x1b[2Jx\\r\\x00: unknown key" in refused(invoke("check-config", str(config)))
    missing = tmp_path / "gone\x1b[8m.yaml"
    assert "gone\\x1b[8m.yaml: cannot read file" in refused(invoke("check-config", str(missing)))
    history = tmp_path / "h.json"
    history.write_text(json.dumps({"version": 1, "decisions": [], "\u202e\x07": 1}))
    assert "h.json: \\u202e\\x07: unknown key" in refused(invoke("plan", str(FIXTURE), "--history", str(history)))
    assert "\\x1b" in refused(invoke("plan", str(tmp_path / "no\x1bsuch.json")))


def test_printable_escapes_only_what_a_terminal_acts_on():
    assert printable("plain é 中 text") == "plain é 中 text"
    assert printable("a\x1b[31mb\r\n\t\x00\u202e") == "a\\x1b[31mb\\r\\n\\t\\x00\\u202e"
    assert str(ConfigProblem("f\x1b", "k\r", "m\x00", "v\x07", True)) == "f\\x1b: k\\r: m\\x00 (got 'v\\x07')"


# -- 4. cluster-plan workers -------------------------------------------------------------------------


def cluster_snapshot(tmp_path: Path, workers: list[dict[str, Any]], name: str = "a.json") -> Path:
    def change(data: dict[str, Any]) -> None:
        data["app"] = "a"
        data["extensions"] = {"cluster": {"app_id": "app-a", "workers": workers, "unreachable": [],
                                          "executor_memory_mb": 1024}}
    path = tmp_path / name
    path.write_text(snapshot_text(change))
    return path


def worker(wid: str = "w1", **figures: Any) -> dict[str, Any]:
    return {"id": wid, "host": "10.0.0.1", "cores_free": 2, "memory_free_mb": 4096, "executors": [], "cores": 8,
            "memory_mb": 8192, **figures}


@pytest.fixture
def apps_config(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text("apps:\n  - {name: a}\n")
    return path


def test_cluster_plan_refuses_impossible_workers_naming_the_worker(tmp_path, apps_config):
    # Each was planned on: two workers of one id (the second's figures replaced the first's), more
    # free cores or memory than the worker has.
    at = "extensions.cluster.workers"
    for workers, fragment in [
        ([worker("w1"), worker("w2"), worker("w1")], f"{at}[2].id: worker 'w1' appears twice (also workers[0])"),
        ([worker("w1", cores_free=9)], f"{at}[0].cores_free: 9 free cores on worker 'w1', which has 8 cores"),
        ([worker("w1", memory_free_mb=9000)], f"{at}[0].memory_free_mb: 9000 MB free on worker 'w1', which has 8192"),
    ]:
        path = cluster_snapshot(tmp_path, workers)
        refused(invoke("cluster-plan", str(path), "--config", str(apps_config)),
                f"invalid snapshot: {path}: {fragment}")
    path = cluster_snapshot(tmp_path, [worker("w1", cores_free=8), worker("w2", cores=0, cores_free=3)])
    assert invoke("cluster-plan", str(path), "--config", str(apps_config)).exit_code == 0  # cores 0: unknown


def mostly(valid: list[Any], invalid: list[Any]) -> st.SearchStrategy[Any]:
    """A valid value about nine times in ten, so that most examples get past the checks."""
    return st.integers(0, 9).flatmap(lambda n: st.sampled_from(invalid if n == 5 else valid))


BAD_NUMBER = [-1, -(10**30), 2**63, 10**30, 1.5, math.inf, "HUGE", None, "8"]


@st.composite
def workers(draw: st.DrawFn) -> list[dict[str, Any]]:
    """1-4 workers, mostly sound; ids from a few (so duplicates come up), numbers at times negative,
    huge, fractional, infinite, of 5,001 digits or no number, free room at times above the size."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        cores_free, memory_free = draw(st.integers(0, 16)), draw(st.integers(0, 1 << 16))
        item = {"id": draw(mostly(["w1", "w2", "w3", "w4", "w5", "w6"], ["", 7])), "host": "h",
                "cores_free": draw(mostly([cores_free], BAD_NUMBER)),
                "memory_free_mb": draw(mostly([memory_free], BAD_NUMBER)), "executors": []}
        if draw(st.booleans()):
            item["cores"] = draw(mostly([cores_free + draw(st.integers(-1, 8))], BAD_NUMBER))
        if draw(st.booleans()):
            item["memory_mb"] = draw(mostly([memory_free + draw(st.integers(-1, 4096))], BAD_NUMBER))
        out.append(item)
    return out


@PROPERTY
@given(workers())
def test_any_cluster_plan_worker_list_is_planned_or_refused_with_exit_2(tmp_path, apps_config, listed):
    path = cluster_snapshot(tmp_path, listed)
    path.write_text(path.read_text().replace('"HUGE"', HUGE).replace("Infinity", "1e999"))
    result = invoke("cluster-plan", str(path), "--config", str(apps_config), "--json")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.output
    event(f"exit {result.exit_code}")
    if result.exit_code == 2:
        assert f"invalid snapshot: {path}: extensions.cluster.workers[" in result.output, result.output
    else:
        ids = [w["id"] for w in listed]
        assert len(set(ids)) == len(ids)
        assert all(not w.get("cores") or w["cores_free"] <= w["cores"] for w in listed)
        assert all(not w.get("memory_mb") or w["memory_free_mb"] <= w["memory_mb"] for w in listed)


# -- 5. simulate ---------------------------------------------------------------------------------------

SIM = ("simulate", "--policy", "ds2")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--graph", "linear:2", "--profile", "steps:10@10s", "--peak-cores", "0"],
     "Invalid value for '--peak-cores': 0.0 is not in the range 0.1<=x<=1000"),  # was a ZeroDivisionError
    (["--graph", "linear:10000000", "--profile", "steps:10@10s"], "graph 'linear:10000000': at most 10000 operators"),
    (["--graph", "linear:2", "--profile", "steps:10@10s", "--apps", "100000"],
     "Invalid value for '--apps': 100000 is not in the range 1<=x<=1000"),  # ran for ever
    (["--graph", "linear:2", "--profile", "constant:10@100000000m"], "duration '100000000m' is above 2.592e+06 s"),
    (["--graph", "linear:2", "--profile", f"constant:{'9' * 400}@10s"], "is above 1e+09 records/s"),  # NaN
    (["--graph", "linear:2", "--profile", "constant:0@10s"], "peaks at 0 records/s"),  # ZeroDivisionError
    (["--graph", "linear:2", "--profile", "steps:10@10s", "--peak-cores", "nan"], "nan is not a finite number"),
    (["--graph", "linear:2", "--profile", "steps:10@10s", "--interval-s", "nan"], "nan is not a finite number"),
    (["--graph", f"linear:{HUGE}", "--profile", "steps:10@10s"], "expected whole numbers after 'linear'"),
    (["--graph", "layered:10000:10", "--apps", "1000", "--profile", "constant:1@1000s"],
     "instance figures, above the 1e+08 a run may build"),
    (["--graph", "linear:2", "--apps", "1000", "--profile", "constant:1@30m"], "app-seconds, above the 1e+06"),
])
def test_simulate_refuses_unbounded_input_with_exit_2(args, fragment, no_hang):
    refused(invoke(*SIM, *args), fragment)


def test_the_profile_parser_bounds_rates_and_durations():
    with pytest.raises(ValueError, match=r"rate '2000000000' is above 1e\+09 records/s"):
        parse_profile("constant:2000000000")
    with pytest.raises(ValueError, match=r"PERIOD '43201m' is above 2.592e\+06 s"):
        parse_profile("sine:10,5,43201m")
    assert parse_profile("constant:1000000000@43200m").duration_s == 30 * 86400


RATE = mostly(["0", "0.0001", "1", "250", "5000", "1000000000"], ["1000000001", "9" * 40, "-1", "1e3"])
DURATION = mostly(["2s", "7s", "20s", "0.5m"], ["1s", "0.5s", "40m", "100000000m", "0s", "5"])


@st.composite
def profiles(draw: st.DrawFn) -> str:
    kind = draw(mostly(["constant", "steps", "ramp", "sine", "diurnal"], ["bare"]))
    rate, duration = draw(RATE), draw(DURATION)
    return {"constant": f"constant:{rate}@{duration}", "bare": rate,
            "steps": f"steps:{rate}@{duration},{draw(RATE)}@{draw(DURATION)}",
            "ramp": f"ramp:{rate}-{draw(RATE)}@{duration}", "sine": f"sine:{rate},{draw(RATE)},{duration}@{duration}",
            "diurnal": f"diurnal:{rate}@{duration}"}[kind]


def floats(valid: list[str]) -> st.SearchStrategy[str]:
    return mostly(valid, ["nan", "inf", "-inf", "-1", "0", "1e9", "x"])


# Mostly small runs (the accepted ones run: they must be quick), with every option's extremes.
@PROPERTY
@given(graph=mostly(["linear:1", "linear:3", "star:3", "dag-diamond", "layered:4:2"],
                    ["linear:0", "linear:10001", "layered:5:10", "ring:4", f"linear:{'9' * 30}"]),
       profile=profiles(), apps=mostly(["1", "2"], ["0", "-1", "1001", "9" * 30]),
       partitions=mostly(["1", "16", "64"], ["0", "4097"]), peak_cores=floats(["0.1", "0.5", "3", "1000"]),
       interval_s=floats(["0.5", "1", "10", "3600"]), restart_cost_s=floats(["0", "10", "3600"]),
       seed=mostly(["0", "7", str(2**63 - 1)], ["-1", "9" * 30]))
def test_any_simulate_input_is_run_or_refused_with_exit_2(graph, profile, apps, partitions, peak_cores, interval_s,
                                                          restart_cost_s, seed):
    result = invoke(*SIM, "--graph", graph, "--profile", profile, "--apps", apps, "--partitions", partitions,
                    "--peak-cores", peak_cores, "--interval-s", interval_s, "--restart-cost-s", restart_cost_s,
                    "--seed", seed, "--json")
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), result.output
    assert "Traceback" not in result.output
    event(f"exit {result.exit_code}")


def test_a_secret_file_above_its_cap_is_refused_without_reading_it_whole(tmp_path):
    from sparkscale.config.secret_files import MAX_SECRET_BYTES, SecretFileProblem, read_secret_file
    big = tmp_path / "pw"
    big.write_bytes(b"x" * (MAX_SECRET_BYTES + 10))
    big.chmod(0o600)
    with pytest.raises(SecretFileProblem, match="above"):
        read_secret_file(big)


@pytest.mark.parametrize("item", [
    "apps.0.spark_conf.spark.authenticate.secret=hunter2",
    "apps.0.spark_conf={spark.ssl.keyPassword: hunter2}",
])
def test_a_spark_secret_given_with_set_is_refused_and_not_echoed(item):
    from sparkscale.config import ConfigError
    from sparkscale.config.loading import load_config
    with pytest.raises(ConfigError) as info:
        load_config(None, ["apps=[{name: a, pipeline: wordcount}]", item])
    assert "is a secret" in str(info.value) and "hunter2" not in str(info.value)


def test_a_plain_spark_setting_with_set_is_still_taken():
    from sparkscale.config.loading import load_config
    cfg = load_config(None, ["apps=[{name: a, pipeline: wordcount}]",
                             "apps.0.spark_conf={spark.ui.retainedJobs: '10'}"])
    assert cfg.app("a").spark_conf["spark.ui.retainedJobs"] == "10"
