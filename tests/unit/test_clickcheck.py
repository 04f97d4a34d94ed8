"""The clickstream fixture's load (bench.filefeed) and oracle (bench.clickcheck), without Spark:
hand-made inputs and hand-made sink outputs (Parquet + a fake `_spark_metadata` log, batch files)."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import json
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkscale_lab.bench import clickcheck, clicks, filefeed
from sparkscale_lab.bench.clickcheck import (
    read_user_batches,
    read_user_totals,
    read_windows,
    verify,
    wait_for_outputs,
)
from sparkscale_lab.bench.clickexpected import expected_outputs, section_of
from sparkscale_lab.bench.clicks import iso_ms, parse_iso_ms
from sparkscale_lab.bench.filefeed import land_files, manifest_files

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "clickstream.py"
START = datetime(2025, 1, 1, tzinfo=UTC)  # a multiple of every window length used here
B = parse_iso_ms("2025-01-01T00:00:00.000Z")


def _load_fixture():
    spec = importlib.util.spec_from_file_location("clickstream_fixture", FIXTURE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _all_records(folder: Path) -> list[dict]:
    files = sorted((p for p in folder.iterdir() if not p.name.startswith(".")), key=lambda p: p.stat().st_mtime_ns)
    return [r for p in files for r in _lines(p)]


def _at(seconds: float) -> str:
    return iso_ms(B + round(seconds * 1000))


# ---------------------------------------------------------------------------------------------
# The fixture


def test_fixture_section_of_is_the_oracles():
    fixture = _load_fixture()
    pages = [t.format(item=i) for t in clicks.PAGES for i in (0, 3, 49)]
    pages += ["/", "", "//", "/Shop", "shop/x", "/SHOP/", "/search?q=a/b", "?q=1", "/Ä/x", None]
    for page in pages:
        assert fixture.section_of(page) == section_of(page), page
    assert section_of("/Shop/item/3") == "shop"
    assert section_of("/search?q=3") == "search"
    assert section_of("/") == "home"


def test_fixture_is_a_plain_user_script():
    fixture = _load_fixture()  # importing it runs nothing: main() is behind the __main__ guard
    tree = ast.parse(FIXTURE.read_text())
    guard = tree.body[-1]
    assert isinstance(guard, ast.If) and ast.unparse(guard.test) == "__name__ == '__main__'"
    assert [ast.unparse(n) for n in guard.body] == ["main()"] and callable(fixture.main)
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"argparse", "json", "os", "time", "pyspark"}  # the standard library and PySpark only
    # The feed writes exactly the fields the job's schema reads.
    fields = [part.split()[0] for part in fixture.SCHEMA.split(",")]
    assert fields == list(clicks.ClickSource(0).next(B).keys())


# ---------------------------------------------------------------------------------------------
# The feed


def test_land_files_counts_names_event_times_and_manifest(tmp_path):
    folder = tmp_path / "in"
    result = land_files(folder, "constant:40@1s", seed=7, files_per_s=4, start_ts=START, realtime=False)
    assert result.file_count == 4 and result.records == 40
    assert result.stopped_by == "profile_end"
    names = sorted(os.listdir(folder))
    assert names == [f"clicks-7-{i:06d}.json" for i in range(4)]  # no temporary files left
    records = _all_records(folder)
    assert [r["event_id"] for r in records] == [f"7-{n}" for n in range(40)]
    assert [r["ts"] for r in records] == [_at(n / 40) for n in range(40)]  # start + records sent / rate
    assert all(len(_lines(folder / n)) == 10 for n in names)
    assert {r["user"] for r in records} <= {f"u{i:02d}" for i in range(clicks.USERS)}
    assert all(isinstance(r["ms"], int) and r["page"].startswith("/") for r in records)
    # The manifest sits next to the directory and lists every file with its records.
    assert result.manifest_path == tmp_path / "in.manifest.json"
    assert manifest_files(result.manifest_path) == dict.fromkeys(names, 10)
    run = filefeed.read_manifest(result.manifest_path)["runs"][0]
    assert run["seed"] == 7 and run["records"] == 40 and run["start_ts"] == "2025-01-01T00:00:00.000Z"
    # Landing order is event-time order, with mtimes at least 1 ms apart (Spark's resolution).
    mtimes = [(folder / n).stat().st_mtime_ns for n in names]
    assert all(b - a >= 1_000_000 for a, b in itertools.pairwise(mtimes))


def test_land_files_is_deterministic_by_seed(tmp_path):
    def contents(folder, seed):
        land_files(folder, "steps:10@1s,30@1s", seed=seed, files_per_s=3, start_ts=START, realtime=False)
        return {p.name: p.read_text() for p in sorted(folder.iterdir())}

    first, again, other = contents(tmp_path / "a", 1), contents(tmp_path / "b", 1), contents(tmp_path / "c", 2)
    assert first == again
    assert list(first.values()) != list(other.values())
    records = [json.loads(line) for text in first.values() for line in text.splitlines()]
    assert len(records) == 40
    stamps = [parse_iso_ms(r["ts"]) for r in records]
    assert stamps == sorted(stamps) and stamps[0] == B and stamps[-1] < B + 2000


def test_records_per_file(tmp_path):
    result = land_files(tmp_path / "in", "constant:30@1s", seed=3, records_per_file=7, start_ts=START,
                        realtime=False)
    assert [f.records for f in result.files] == [7, 7, 7, 7, 2]
    assert [f.first_seq for f in result.files] == [0, 7, 14, 21, 28]
    assert [r["ts"] for r in _all_records(tmp_path / "in")] == [_at(n / 30) for n in range(30)]


def test_flush_file_is_last_and_far_enough_ahead(tmp_path):
    folder = tmp_path / "in"
    result = land_files(folder, "constant:20@1s", seed=5, files_per_s=2, start_ts=START, realtime=False,
                        flush=True, window_s=10, watermark_s=5)
    assert result.records == 21 and result.flush_file == "clicks-5-flush.json"
    flush = _lines(folder / result.flush_file)
    assert len(flush) == 1
    assert flush[0]["event_id"] == "5-20" and flush[0]["user"].startswith("u")
    last_regular = parse_iso_ms(result.files[-2].last_ts)
    assert parse_iso_ms(flush[0]["ts"]) == last_regular + (10 + 5 + 1) * 1000
    newest = max(folder.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    assert newest.name == result.flush_file
    assert manifest_files(result.manifest_path)[result.flush_file] == 1
    # Every window the regular records fall in is emitted; the flush record's own window is not.
    expected = expected_outputs(folder, 10, 5)
    assert sum(expected.windows.values()) == 20 and sum(expected.open_windows.values()) == 1
    assert sum(c for c, _ in expected.users.values()) == 21


def test_files_land_atomically_in_real_time(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    seen_partial: list[str] = []
    seen_names: set[str] = set()
    done = threading.Event()

    def watch():
        while not done.is_set():
            for entry in os.scandir(folder):
                if entry.name.startswith("."):
                    continue
                seen_names.add(entry.name)
                text = Path(entry.path).read_text()
                if not text.endswith("\n") or any(not line.startswith("{") for line in text.splitlines()):
                    seen_partial.append(entry.name)

    watcher = threading.Thread(target=watch)
    watcher.start()
    t0 = time.monotonic()
    try:
        result = land_files(folder, "constant:200@1s", seed=1, files_per_s=5, start_ts=START)
    finally:
        done.set()
        watcher.join()
    assert 0.9 <= time.monotonic() - t0 < 5  # paced by the wall clock
    assert seen_partial == []
    assert seen_names and seen_names <= {f.name for f in result.files}
    assert sorted(os.listdir(folder)) == sorted(f.name for f in result.files)
    assert result.records == 200 and all(f.records == 40 for f in result.files)


def test_stop_event_and_unbounded_profiles(tmp_path):
    with pytest.raises(ValueError, match="unbounded"):
        land_files(tmp_path / "x", "constant:10", start_ts=START)
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    result = land_files(tmp_path / "in", "constant:100", seed=2, files_per_s=10, stop=stop, start_ts=START,
                        flush=True)
    assert result.stopped_by == "stop_event"
    assert 20 <= result.records <= 80 and result.flush_file is not None
    capped = land_files(tmp_path / "cap", "constant:100", files_per_s=10, start_ts=START, max_duration_s=0.3,
                        realtime=False)
    assert capped.stopped_by == "max_duration" and capped.records == 30


def test_manifest_appends_runs_and_refuses_to_overwrite(tmp_path):
    folder = tmp_path / "in"
    land_files(folder, "constant:10@1s", seed=1, start_ts=START, realtime=False)
    land_files(folder, "constant:10@1s", seed=2, start_ts=START, realtime=False)
    manifest = filefeed.default_manifest_path(folder)
    assert len(filefeed.read_manifest(manifest)["runs"]) == 2
    assert set(manifest_files(manifest)) == set(os.listdir(folder))
    with pytest.raises(FileExistsError):
        land_files(folder, "constant:10@1s", seed=1, start_ts=START, realtime=False)


# ---------------------------------------------------------------------------------------------
# The oracle


def _write_input(folder: Path, name: str, records: list[tuple[float, str, str, int]], mtime_s: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    with open(path, "w") as out:
        for i, (t, user, page, ms) in enumerate(records):
            record = {"event_id": f"{name}-{i}", "user": user, "page": page, "ts": _at(t), "ms": ms}
            out.write(json.dumps(record) + "\n")
    os.utime(path, (mtime_s, mtime_s))


def _hand_input(folder: Path) -> None:
    _write_input(folder, "a.json", [(1.0, "u1", "/Shop/item/3", 10), (9.999, "u2", "/shop/cart", 20),
                                    (10.0, "u1", "/Search/results", 30)], mtime_s=1000)
    _write_input(folder, "b.json", [(12.5, "u3", "/", 5), (25.0, "u1", "/HELP/faq", 1)], mtime_s=1001)
    (folder / ".c.json.tmp").write_text("garbage")  # hidden: Spark skips it, so does the oracle
    (folder / "_SUCCESS").write_text("")


def test_expected_outputs_follow_append_mode_watermark(tmp_path):
    _hand_input(tmp_path / "in")
    expected = expected_outputs(tmp_path / "in", window_s=10, watermark_s=5)
    assert expected.records == 5 and set(expected.files) == {"a.json", "b.json"}
    assert expected.max_event_ms == B + 25_000 and expected.final_watermark_ms == B + 20_000
    # [0,10) ends at 10 <= 20; [10,20) ends at 20 <= 20 (inclusive); [20,30) stays open.
    assert expected.windows == {(_at(0), "shop"): 2, (_at(10), "search"): 1, (_at(10), "home"): 1}
    assert expected.open_windows == {(_at(20), "help"): 1}
    assert expected.users == {"u1": (3, 41), "u2": (1, 20), "u3": (1, 5)}
    assert expected.late_risk == 0 and expected.bad_lines == 0


def test_expected_outputs_flag_records_that_could_be_late(tmp_path):
    _write_input(tmp_path / "in", "a.json", [(30.0, "u1", "/", 1)], mtime_s=1000)
    _write_input(tmp_path / "in", "b.json", [(24.9, "u1", "/", 1), (25.1, "u2", "/", 1)], mtime_s=1001)
    assert expected_outputs(tmp_path / "in", 10, 5).late_risk == 1


# -- fake sink output


def _sink(output: Path) -> Path:
    sink = output / "page_windows"
    (sink / "_spark_metadata").mkdir(parents=True, exist_ok=True)
    return sink


def _parquet(sink: Path, name: str, rows: list[tuple[str, str, int]], int96: bool = True) -> Path:
    starts = [parse_iso_ms(start) for start, _, _ in rows]
    if int96:  # Spark's default (spark.sql.parquet.outputTimestampType=INT96): read back as timestamp[ns]
        column = pa.array([s * 1000 for s in starts], type=pa.timestamp("us"))
    else:  # TIMESTAMP_MICROS, adjusted to UTC
        column = pa.array([s * 1000 for s in starts], type=pa.timestamp("us", tz="UTC"))
    table = pa.table({"window_start": column, "section": [s for _, s, _ in rows],
                      "count": pa.array([c for _, _, c in rows], type=pa.int64())})
    path = sink / name
    pq.write_table(table, path, use_deprecated_int96_timestamps=int96)
    return path


def _log(sink: Path, name: str, entries: list[tuple[Path, str]], style: str = "file:") -> None:
    lines = ["v1"]
    for path, action in entries:
        url = (style + quote(str(path))) if style == "file:" else str(path)
        lines.append(json.dumps({"path": url, "size": 1, "isDir": False, "modificationTime": 0,
                                 "blockReplication": 1, "blockSize": 1, "action": action}))
    (sink / "_spark_metadata" / name).write_text("\n".join(lines))


def _batch(output: Path, batch_id: int, rows: list[tuple[str, int, int]]) -> None:
    folder = output / "user_totals"
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps({"user": u, "clicks": c, "total_ms": t}) + "\n" for u, c, t in rows)
    (folder / f"batch-{batch_id:08d}.json").write_text(text)


def test_read_windows_reads_only_committed_files_and_reports_duplicates(tmp_path):
    output = tmp_path / "out dir"  # a space: log paths are percent-encoded URLs
    sink = _sink(output)
    p0 = _parquet(sink, "part-00000-a.snappy.parquet", [(_at(0), "shop", 2)])
    p1 = _parquet(sink, "part-00000-b.snappy.parquet", [(_at(10), "search", 1), (_at(10), "home", 1)], int96=False)
    _parquet(sink, "part-00000-failed.snappy.parquet", [(_at(20), "help", 99), (_at(0), "shop", 2)])  # not listed
    p3 = _parquet(sink, "part-00000-c.snappy.parquet", [(_at(0), "shop", 2)])  # the same window again
    _log(sink, "0", [(p0, "add")])
    _log(sink, "1", [(p1, "add")], style="plain")
    _log(sink, "2", [(p3, "add")])
    (sink / "_spark_metadata" / ".3.abc.tmp").write_text("v1\n{")  # an uncommitted log file
    windows = read_windows(output)
    assert windows.counts == {(_at(0), "shop"): 2, (_at(10), "search"): 1, (_at(10), "home"): 1}
    assert windows.duplicates == {(_at(0), "shop"): [2, 2]}
    assert [Path(p).name for p in windows.uncommitted_files] == ["part-00000-failed.snappy.parquet"]
    assert windows.last_batch_id == 2 and windows.missing_files == []


def test_read_windows_follows_compaction_and_deletes(tmp_path):
    sink = _sink(tmp_path / "out")
    p0 = _parquet(sink, "p0.parquet", [(_at(0), "shop", 1)])
    p1 = _parquet(sink, "p1.parquet", [(_at(10), "shop", 2)])
    p2 = _parquet(sink, "p2.parquet", [(_at(20), "shop", 3)])
    stale = _parquet(sink, "stale.parquet", [(_at(30), "shop", 4)])
    _log(sink, "0", [(p0, "add"), (stale, "add")])  # superseded by 1.compact
    _log(sink, "1.compact", [(p0, "add"), (p1, "add")])
    _log(sink, "2", [(p2, "add"), (p1, "delete")])
    windows = read_windows(tmp_path / "out")
    assert windows.counts == {(_at(0), "shop"): 1, (_at(20), "shop"): 3}
    assert windows.last_batch_id == 2


def test_read_windows_before_the_job_wrote_anything(tmp_path):
    windows = read_windows(tmp_path / "nothing")
    assert windows.counts == {} and windows.last_batch_id is None


def test_read_user_totals_takes_the_latest_per_user(tmp_path):
    _batch(tmp_path, 0, [("u1", 1, 10), ("u2", 1, 20)])
    _batch(tmp_path, 1, [("u1", 2, 40)])  # update mode: only u1 changed
    _batch(tmp_path, 2, [])
    (tmp_path / "user_totals" / ".batch-00000003.json.tmp").write_text('{"user": "u1", "clicks": 99}\n')
    assert read_user_totals(tmp_path) == {"u1": (2, 40), "u2": (1, 20)}
    batches = read_user_batches(tmp_path)
    assert batches.batch_ids == [0, 1, 2] and not batches.duplicates and not batches.regressions
    _batch(tmp_path, 3, [("u2", 3, 1), ("u2", 3, 1), ("u1", 1, 10)])
    batches = read_user_batches(tmp_path)
    assert batches.duplicates == {"u2": [3]} and batches.regressions == {"u1": [3]}


# -- verify


def _good_output(output: Path) -> None:
    sink = _sink(output)
    p0 = _parquet(sink, "p0.parquet", [(_at(0), "shop", 2)])
    p1 = _parquet(sink, "p1.parquet", [(_at(10), "search", 1), (_at(10), "home", 1)])
    _log(sink, "0", [(p0, "add")])
    _log(sink, "1", [])
    _log(sink, "2", [(p1, "add")])
    _batch(output, 0, [("u1", 2, 40), ("u2", 1, 20)])
    _batch(output, 1, [("u1", 3, 41), ("u3", 1, 5)])


def test_verify_passes_on_the_right_output(tmp_path):
    _hand_input(tmp_path / "in")
    _good_output(tmp_path / "out")
    check = verify(tmp_path / "in", tmp_path / "out", 10, 5)
    assert check.ok, check.details()
    assert check.summary().startswith("clickcheck OK: input 5 records in 2 files; windows 3/3 (lost 0")
    assert check.windows_batch == 2 and check.users_batch == 1


def test_verify_counts_lost_duplicated_wrong_and_extra(tmp_path):
    _hand_input(tmp_path / "in")
    output = tmp_path / "out"
    sink = _sink(output)
    p0 = _parquet(sink, "p0.parquet", [(_at(0), "shop", 3), (_at(10), "home", 1)])
    p1 = _parquet(sink, "p1.parquet", [(_at(10), "home", 1), (_at(20), "help", 1)])
    _log(sink, "0", [(p0, "add"), (p1, "add")])
    _batch(output, 0, [("u1", 3, 41), ("u2", 2, 40), ("u9", 1, 1)])
    check = verify(tmp_path / "in", output, 10, 5)
    assert not check.ok
    assert check.windows_lost == [(_at(10), "search")]
    assert check.windows_wrong == {(_at(0), "shop"): (2, 3)}
    assert check.windows_duplicated == {(_at(10), "home"): [1, 1]}
    assert check.windows_extra == {(_at(20), "help"): 1}  # emitted although the watermark never passed it
    assert check.users_lost == ["u3"]
    assert check.users_wrong == {"u2": ((1, 20), (2, 40))}
    assert check.users_extra == {"u9": (1, 1)}
    summary = check.summary()
    assert "FAILED" in summary and "lost 1, duplicated 1, wrong 1, extra 1" in summary
    assert "\n" not in summary and "users lost: u3" in check.details()


def test_verify_checks_the_manifest_against_the_input(tmp_path):
    folder = tmp_path / "in"
    result = land_files(folder, "constant:20@2s", seed=4, files_per_s=2, start_ts=START, realtime=False, flush=True)
    check = verify(folder, tmp_path / "out", 10, 5)
    assert check.input_problems == [] and check.input_records == 41
    assert len(check.windows_lost) == check.windows_expected > 0  # nothing written yet
    first, second = folder / result.files[0].name, folder / result.files[1].name
    first_mtime, second_mtime = first.stat().st_mtime_ns, second.stat().st_mtime_ns
    first.unlink()
    stray = folder / "stray.json"
    stray.write_text(json.dumps({"event_id": "x", "user": "u1", "page": "/", "ts": _at(1), "ms": 1}) + "\n")
    os.utime(stray, ns=(first_mtime, first_mtime))  # read first, as the removed file was: not late
    second.write_text("\n".join(second.read_text().splitlines()[:-1]) + "\n")
    os.utime(second, ns=(second_mtime, second_mtime))
    problems = verify(folder, tmp_path / "out", 10, 5).input_problems
    assert len(problems) == 3
    assert "1 landed files missing" in problems[0] and "not in the manifest" in problems[1]
    assert "record count" in problems[2]


def _simulate_job(input_dir: Path, output: Path, window_s: float, watermark_s: float) -> None:
    """What the job writes once done, from a brute-force reading of the input."""
    records = _all_records(input_dir)
    window_ms, top = round(window_s * 1000), max(parse_iso_ms(r["ts"]) for r in records)
    counts: dict[tuple[int, str], int] = {}
    totals: dict[str, tuple[int, int]] = {}
    for r in records:
        ts = parse_iso_ms(r["ts"])
        key = (ts // window_ms * window_ms, r["page"].split("?")[0].strip("/").split("/")[0].lower() or "home")
        counts[key] = counts.get(key, 0) + 1
        c, t = totals.get(r["user"], (0, 0))
        totals[r["user"]] = (c + 1, t + r["ms"])
    closed = sorted(k for k in counts if k[0] + window_ms <= top - watermark_s * 1000)
    sink = _sink(output)
    half = len(closed) // 2
    for batch_id, part in enumerate((closed[:half], closed[half:])):
        path = _parquet(sink, f"part-{batch_id}.parquet", [(iso_ms(s), sec, counts[(s, sec)]) for s, sec in part])
        _log(sink, str(batch_id), [(path, "add")])
    _batch(output, 0, sorted((u, c, t) for u, (c, t) in totals.items()))


def test_feed_then_simulated_job_then_wait(tmp_path):
    folder, output = tmp_path / "in", tmp_path / "out"
    land_files(folder, "steps:30@3s,60@4s", seed=9, files_per_s=2, start_ts=START, realtime=False, flush=True,
               window_s=2, watermark_s=1)
    timer = threading.Timer(0.3, _simulate_job, (folder, output, 2, 1))
    timer.start()
    check = wait_for_outputs(folder, output, 2, 1, timeout_s=20, interval_s=0.1)
    timer.join()
    assert check.ok, check.details()
    assert check.input_records == 30 * 3 + 60 * 4 + 1
    assert check.windows_expected > 3 and check.input_problems == []


def test_wait_for_outputs_gives_up_with_the_last_check(tmp_path):
    _hand_input(tmp_path / "in")
    check = wait_for_outputs(tmp_path / "in", tmp_path / "out", 10, 5, timeout_s=0.3, interval_s=0.1)
    assert not check.ok and len(check.windows_lost) == 3 and len(check.users_lost) == 3


def test_cli(tmp_path, capsys):
    _hand_input(tmp_path / "in")
    _good_output(tmp_path / "out")
    assert clickcheck.main(["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]) == 0
    assert "clickcheck OK" in capsys.readouterr().out
