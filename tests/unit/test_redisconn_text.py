"""redisconn's decoding of what redis-py answers, and its retyping of fields to write."""

from __future__ import annotations

from sparkscale.redisconn import stream_entries, text, text_hash, to_write


def test_text_decodes_bytes_and_keeps_str() -> None:
    assert text(b"1-0") == "1-0"
    assert text("1-0") == "1-0"


def test_text_hash_decodes_keys_and_values_and_reads_nil_as_empty() -> None:
    assert text_hash({b"run_id": b"r1", "batch_id": "3"}) == {"run_id": "r1", "batch_id": "3"}
    assert text_hash(None) == {}


def test_stream_entries_decode_ids_and_fields_and_read_nil_as_empty() -> None:
    raw: list[tuple[bytes | str | None, dict[bytes | str, bytes | str] | None]] = [
        (b"5-0", {b"kind": b"decision"}), ("6-0", None)]
    assert stream_entries(raw) == [("5-0", {"kind": "decision"}), ("6-0", {})]
    assert stream_entries(None) == []


def test_to_write_copies_the_fields() -> None:
    fields = {"a": "1", "b": 2.5}
    written = to_write(fields)
    assert written == fields and written is not fields
