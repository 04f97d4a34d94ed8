"""Each source's backlog estimate and positions, as the agent publishes them: offsets that count
records (the Redis streams source, Kafka), the file source's listing against its checkpoint log
(positions in files), and no signal."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

from sparkscale.agent.sources import FileBacklog, SourceReporter, record_positions, source_kind


def source(description: str, start=None, end=None, latest=None, rows: int = 0, metrics=None):
    return SimpleNamespace(description=description, startOffset=json.dumps(start) if start is not None else None,
                           endOffset=json.dumps(end) if end is not None else None,
                           latestOffset=json.dumps(latest) if latest is not None else None,
                           numInputRows=rows, inputRowsPerSecond=1.0, processedRowsPerSecond=2.0,
                           metrics=metrics or {})


def progress(batch_id: int, *sources):
    return SimpleNamespace(batchId=batch_id, sources=list(sources))


def test_record_positions_of_redis_and_kafka_offsets_and_nothing_else():
    assert record_positions({"ids": {"0": "1-0", "1": "2-0"}, "counts": {"0": 5, "1": 7}}) == {"0": 5, "1": 7}
    assert record_positions(json.dumps({"clicks": {"0": 10, "1": 3}})) == {"clicks/0": 10, "clicks/1": 3}
    assert record_positions({"clicks": {"0": -1}}) is None  # Kafka's "latest" marker is no position
    assert record_positions({"logOffset": 4}) is None  # the file source's offset
    assert record_positions(None) is None


def test_offsets_that_count_records_give_an_exact_backlog_and_position():
    kafka = source("KafkaV2[Subscribe[clicks]]", start={"clicks": {"0": 0}}, end={"clicks": {"0": 40, "1": 10}},
                   latest={"clicks": {"0": 100, "1": 15}}, rows=50, metrics={"maxOffsetsBehindLatest": "60"})
    [report] = SourceReporter(None).reports(progress(3, kafka))
    assert (report.kind, report.backlog_records, report.position_records) == ("kafka", 65, 115)
    assert report.backlog_estimate == "source_offsets" and report.metrics == {"maxOffsetsBehindLatest": "60"}
    redis_src = source("RedisStreams", end={"ids": {"0": "9-0"}, "counts": {"0": 9}},
                       latest={"ids": {"0": "12-0"}, "counts": {"0": 12}})
    [report] = SourceReporter(None).reports(progress(1, redis_src))
    assert (report.kind, report.backlog_records, report.position_records) == ("redis_streams", 3, 12)


def test_a_source_without_a_signal_says_backlog_unknown():
    [report] = SourceReporter(None).reports(progress(0, source("RateStreamV2[rowsPerSecond=5]", end=7, latest=9)))
    assert report.backlog_records is None and report.backlog_estimate == "unknown"
    assert "reports no backlog" in report.backlog_detail and report.kind == "rate"


def _log(directory: Path, name: str, batch: int, files: list[Path]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["v1"] + [json.dumps({"path": f"file://{f}", "timestamp": 0, "batchId": batch}) for f in files]
    (directory / name).write_text("\n".join(lines) + "\n")


def test_the_file_backlog_is_unlogged_files_times_rows_per_file(tmp_path):
    data, checkpoint = tmp_path / "in", tmp_path / "cp"
    data.mkdir()
    files = [data / f"f{i}.json" for i in range(5)]
    for f in files:
        f.write_text("{}\n")
    (data / ".f5.json.tmp").write_text("{}\n")  # a file still being written: Spark ignores it, so do we
    (data / "_SUCCESS").write_text("")
    _log(checkpoint / "sources" / "0", "0", 0, files[:2])
    reporter = SourceReporter(f"file:{checkpoint}")
    [report] = reporter.reports(progress(0, source(f"FileStreamSource[file:{data}]", end={"logOffset": 0}, rows=20)))
    assert report.kind == "file" and report.backlog_files == 3
    assert report.backlog_records == 30 and report.backlog_estimate == "file_listing"  # 3 files x 10 rows
    _log(checkpoint / "sources" / "0", "1", 1, files[2:4])
    [report] = reporter.reports(progress(1, source(f"FileStreamSource[file:{data}]", start={"logOffset": 0},
                                                   end={"logOffset": 1}, rows=8)))
    assert (report.backlog_files, report.backlog_records) == (1, 4)  # rows per file now 4


def test_a_compacted_log_counts_and_rows_per_file_unknown_until_a_batch_read_files(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    files = [data / f"f{i}.json" for i in range(3)]
    for f in files:
        f.write_text("{}\n")
    log_dir = tmp_path / "cp" / "sources" / "0"
    _log(log_dir, "9.compact", 9, files[:1])
    backlog = FileBacklog(str(data), log_dir)
    reading = backlog.report({"logOffset": 9}, {"logOffset": 9}, 0)  # a batch without new files
    assert (reading.backlog_records, reading.backlog_files, reading.position_files) == (None, 2, 3)
    assert reading.detail.endswith("2 files behind, rows per file not seen yet")


def _file_source(data: Path, start: int | None, end: int, rows: int):
    return source(f"FileStreamSource[file:{data}]", start={"logOffset": start} if start is not None else None,
                  end={"logOffset": end}, rows=rows)


def test_a_file_source_reports_positions_in_files_from_its_checkpoint_log(tmp_path):
    """Arrived: files the checkpoint logged plus unlogged ones present; processed: logged through the
    batch's logOffset (arrived - backlog_files). Exact, and the same for a restarted run."""
    data, checkpoint = tmp_path / "in dir", tmp_path / "cp"
    data.mkdir()
    files = [data / f"f{i}.json" for i in range(8)]
    for f in files[:6]:
        f.write_text("{}\n{}\n")
    log_dir = checkpoint / "sources" / "0"
    # Batches 0..9 of the source's log, 0 and 1 with files; 9.compact repeats every entry, and
    # Spark deletes the compacted files only later: both are there.
    _log(log_dir, "0", 0, files[:2])
    _log(log_dir, "1", 1, files[2:3])
    _log(log_dir, "9.compact", 9, [])
    (log_dir / "9.compact").write_text("\n".join(["v1"] + [
        json.dumps({"path": f"file://{f}".replace(" ", "%20"), "timestamp": 0, "batchId": b})
        for f, b in ((files[0], 0), (files[1], 0), (files[2], 1), (files[3], 9))]) + "\n")
    reporter = SourceReporter(f"file:{checkpoint}")
    [first] = reporter.reports(progress(4, _file_source(data, 0, 1, rows=2)))
    assert (first.kind, first.position_unit, first.position_records, first.backlog_files) == ("file", "files", 6, 3)
    assert first.position_records - first.backlog_files == 3  # processed: files logged through logOffset 1
    assert first.backlog_records == 6 and first.backlog_estimate == "file_listing"  # 3 files x 2 rows (1 file read)
    assert first.backlog_detail.startswith("positions in files: 4 logged by the checkpoint (3 through logOffset 1)")
    # The next batch logged its file before the listener ran, and a file arrived: backlog includes both.
    _log(log_dir, "10", 10, files[4:5])
    files[6].write_text("{}\n")
    [second] = reporter.reports(progress(5, _file_source(data, 1, 9, rows=2)))
    assert (second.position_records, second.backlog_files) == (7, 3)  # processed 4 = 3 + files[3]
    # A restart reads the same log: the same positions; files logged and deleted since still count.
    files[0].unlink()
    [again] = SourceReporter(f"file:{checkpoint}").reports(progress(6, _file_source(data, 9, 10, rows=2)))
    assert (again.position_records, again.position_records - again.backlog_files) == (7, 5)


def test_a_file_source_whose_log_does_not_reach_its_offset_reports_no_positions(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    (data / "f0.json").write_text("{}\n")
    [report] = SourceReporter(f"file:{tmp_path / 'elsewhere'}").reports(progress(0, _file_source(data, None, 0, 1)))
    assert report.position_records is None and report.backlog_files is None and report.backlog_records is None
    assert "does not reach logOffset 0" in report.backlog_detail and report.backlog_estimate == "unknown"


def test_source_kinds():
    assert source_kind("FileStreamSource[file:/x]", None) == "file"
    assert source_kind("anything", json.dumps({"ids": {}, "counts": {}})) == "redis_streams"
    assert source_kind("KafkaV2[Subscribe[t]]", None) == "kafka"
    assert source_kind("MySource", None) == "other"


def _sized(directory: Path, names: range, size_bytes: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    files = [directory / f"f{i}.json" for i in names]
    for f in files:
        f.write_text("x" * (size_bytes - 1) + "\n")
    return files


def test_the_file_backlog_is_priced_by_bytes_so_bigger_files_weigh_more(tmp_path):
    """The load quadruples, and so do the files: 5 new files of 4x the size are 4x the records
    (issue 33: priced per file, the backlog read 50 where 200 waited)."""
    data, log_dir = tmp_path / "in", tmp_path / "cp" / "sources" / "0"
    read = _sized(data, range(2), 100)
    _log(log_dir, "0", 0, read)
    backlog = FileBacklog(str(data), log_dir)
    first = backlog.report(None, {"logOffset": 0}, 20)  # 20 rows in 200 bytes: 0.1 rows per byte
    assert (first.backlog_records, first.backlog_files) == (0, 0)
    _sized(data, range(2, 7), 400)
    reading = backlog.report({"logOffset": 0}, {"logOffset": 0}, 0)
    assert (reading.backlog_records, reading.backlog_files) == (200, 5)  # 2000 bytes x 0.1, not 5 x 10 rows
    assert reading.detail.endswith("5 files behind, 2.0 KiB x 0.1 rows per byte")
    # Files logged for a later batch are behind too, and sized the same way.
    _log(log_dir, "1", 1, [data / "f2.json"])
    assert backlog.report({"logOffset": 0}, {"logOffset": 0}, 0).backlog_records == 200


def test_a_batch_without_rows_or_bytes_keeps_the_price(tmp_path):
    data, log_dir = tmp_path / "in", tmp_path / "cp" / "sources" / "0"
    _log(log_dir, "0", 0, _sized(data, range(2), 100))
    backlog = FileBacklog(str(data), log_dir)
    backlog.report(None, {"logOffset": 0}, 20)
    _log(log_dir, "1", 1, _sized(data, range(2, 4), 300))
    backlog.report({"logOffset": 0}, {"logOffset": 1}, 0)  # read 600 bytes, no rows: no price
    empty = data / "empty.json"
    empty.write_text("")
    _log(log_dir, "2", 2, [empty])
    backlog.report({"logOffset": 1}, {"logOffset": 2}, 7)  # 7 rows in 0 bytes: no price by bytes
    _sized(data, range(4, 5), 500)
    reading = backlog.report({"logOffset": 2}, {"logOffset": 2}, 0)
    assert (backlog.rows_per_byte, reading.backlog_records) == (0.1, 50)


def test_a_batch_whose_files_are_gone_keeps_the_price_unless_their_size_was_seen(tmp_path):
    """cleanSource archives a batch's files: their size seen while they were behind prices the
    batch; a file never seen and gone leaves the last price."""
    data, log_dir = tmp_path / "in", tmp_path / "cp" / "sources" / "0"
    _log(log_dir, "0", 0, _sized(data, range(2), 100))
    backlog = FileBacklog(str(data), log_dir)
    backlog.report(None, {"logOffset": 0}, 20)  # 0.1 rows per byte
    seen = _sized(data, range(2, 4), 200)
    backlog.report({"logOffset": 0}, {"logOffset": 0}, 0)  # seen behind: 400 bytes
    _log(log_dir, "1", 1, seen)
    for f in seen:
        f.unlink()
    backlog.report({"logOffset": 0}, {"logOffset": 1}, 80)
    assert backlog.rows_per_byte == 0.2  # 80 rows in the 400 bytes seen
    never_seen = _sized(data, range(4, 6), 50)
    _log(log_dir, "2", 2, never_seen)
    never_seen[0].unlink()
    reading = backlog.report({"logOffset": 1}, {"logOffset": 2}, 1000)
    assert backlog.rows_per_byte == 0.2 and backlog.rows_per_file == 500  # bytes unknown: the byte price stays
    assert (reading.backlog_records, reading.backlog_files) == (0, 0)


def test_a_file_behind_that_vanished_counts_no_bytes(tmp_path):
    data, log_dir = tmp_path / "in", tmp_path / "cp" / "sources" / "0"
    _log(log_dir, "0", 0, _sized(data, range(2), 100))
    later = _sized(data, range(2, 4), 100)
    _log(log_dir, "1", 1, later)
    later[0].unlink()  # logged for the next batch, then deleted
    reading = FileBacklog(str(data), log_dir).report(None, {"logOffset": 0}, 20)
    assert (reading.backlog_records, reading.backlog_files) == (10, 2)  # 100 bytes x 0.1: the gone file weighs 0


def test_without_bytes_the_backlog_falls_back_to_rows_per_file(tmp_path, monkeypatch):
    """No batch's bytes known yet (its files gone, never seen), or a file behind that cannot be
    sized: the price per file, and the detail says so."""
    data, log_dir = tmp_path / "in", tmp_path / "cp" / "sources" / "0"
    read = _sized(data, range(2), 100)
    _log(log_dir, "0", 0, read)
    for f in read:
        f.unlink()
    _sized(data, range(2, 5), 400)
    backlog = FileBacklog(str(data), log_dir)
    reading = backlog.report(None, {"logOffset": 0}, 20)
    assert (backlog.rows_per_byte, reading.backlog_records) == (None, 30)  # 3 files x 10 rows
    assert reading.detail.endswith("3 files behind x 10.0 rows per file (no batch's bytes known yet)")
    _log(log_dir, "1", 1, _sized(data, range(5, 7), 100))
    backlog.report({"logOffset": 0}, {"logOffset": 1}, 20)  # 0.1 rows per byte
    later = data / "f2.json"
    _log(log_dir, "2", 2, [later])
    real_stat = os.stat

    def stat(path: str, *args: object, **kwargs: object) -> os.stat_result:
        if str(path) == str(later):
            raise PermissionError(13, "denied", str(path))
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", stat)
    reading = backlog.report({"logOffset": 1}, {"logOffset": 1}, 0)
    assert (reading.backlog_files, reading.backlog_records) == (3, 30)  # 3 files x 10 rows, not 1200 bytes x 0.1
    assert reading.detail.endswith("x 10.0 rows per file (a file behind could not be sized)")
