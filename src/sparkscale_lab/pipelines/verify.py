"""Reading back what was produced and what arrived, and counting what was lost or duplicated.

The readers know the Redis layout of the input streams (docs/internals.md) and of the sinks
(`sparkscale_lab/pipelines/sinks.py`; the key names are `protocol/sinks.py`'s); the comparisons are pure and generic.
Which uids or counts a workload should output is the workload's business: it builds the expectation
and hands it to `compare_*`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import redis
import structlog

from sparkscale.protocol.keys import input_stream_key, input_stream_prefix
from sparkscale.protocol.sinks import SinkTarget

log = structlog.get_logger(__name__)

_PAGE = 1000
_SHOWN_KEYS = 10


# ---------------------------------------------------------------------------------------------
# Reading


@dataclass(frozen=True)
class InputRecord:
    """One entry of an input stream, as the load generator wrote it."""

    partition: int
    entry_id: str
    uid: str | None
    ts_ms: int | None
    fields: dict[str, str]


def input_partitions(client: redis.Redis, prefix: str, app: str) -> list[int]:
    """Partition numbers of the existing streams `{prefix}{app}:in:{i}`, sorted."""
    pattern = re.compile(re.escape(input_stream_prefix(prefix, app)) + r"(\d+)")
    found: set[int] = set()
    for key in client.scan_iter(match=f"{_glob_escape(prefix + app)}:in:*", count=_PAGE):
        text = key.decode() if isinstance(key, bytes) else key
        match = pattern.fullmatch(text)
        if match:
            found.add(int(match.group(1)))
    return sorted(found)


def read_input_records(client: redis.Redis, prefix: str, app: str) -> list[InputRecord]:
    """Every entry of every input stream of `app`, partition by partition, in stream order."""
    return [record for p in input_partitions(client, prefix, app)
            for record in _stream_entries(client, input_stream_key(prefix, app, p), p)]


def read_record_sink(client: redis.Redis, target: SinkTarget, mode: Literal["idempotent", "append"]) -> Counter[str]:
    """How many times each uid arrived: over all committed batches, or over the append log."""
    arrived: Counter[str] = Counter()
    if mode == "append":
        length = client.llen(target.log_key)
        for first in range(0, length, _PAGE):
            arrived.update(_text(uid) for uid in client.lrange(target.log_key, first, first + _PAGE - 1))
        return arrived
    for batch_id in client.zrange(target.batches_key, 0, -1):
        for uid, times in client.zscan_iter(target.batch_key(int(_text(batch_id))), count=_PAGE):
            arrived[_text(uid)] += int(times)
    return arrived


def read_keyed_sink(client: redis.Redis, target: SinkTarget,
                    parse: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """The keyed sink's latest value per key; values become int or float where they parse."""
    convert = parse or _number_or_text
    return {_text(k): convert(_text(v)) for k, v in client.hscan_iter(target.kv_key, count=_PAGE)}


# ---------------------------------------------------------------------------------------------
# Comparing (pure)


@dataclass(frozen=True)
class VerifyResult:
    """Loss and duplication, in records (or in counted units for keyed results)."""

    total_expected: int
    total_arrived: int
    lost: int  # expected but missing (records), or per-key deficits (keyed)
    duplicated: int  # arrivals beyond the first (records), or per-key surpluses (keyed)
    mismatched_keys: tuple[str, ...] = ()  # uids or keys whose arrival differs from expected
    unexpected: int = 0  # arrivals for uids or keys that were not expected at all
    kind: Literal["records", "keyed"] = "records"
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.unexpected == 0 and not self.mismatched_keys

    def summary(self) -> str:
        shown = ", ".join(self.mismatched_keys[:_SHOWN_KEYS])
        more = len(self.mismatched_keys) - _SHOWN_KEYS
        tail = f" (+{more} more)" if more > 0 else ""
        return (f"{self.kind}: expected {self.total_expected}, arrived {self.total_arrived}, lost {self.lost}, "
                f"duplicated {self.duplicated}, unexpected {self.unexpected}; mismatched: [{shown}]{tail}")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def compare_records(expected_uids: Iterable[str], arrived: Mapping[str, int]) -> VerifyResult:
    """Each expected uid should arrive exactly once: lost = never arrived, duplicated = extra arrivals.

    An expected uid listed twice is expected twice (the producer wrote it twice).
    """
    expected = Counter(expected_uids)
    lost = duplicated = unexpected = 0
    mismatched: list[str] = []
    for uid, want in expected.items():
        got = arrived.get(uid, 0)
        if got != want:
            mismatched.append(uid)
            lost += max(want - got, 0)
            duplicated += max(got - want, 0)
    for uid, got in arrived.items():
        if uid not in expected and got > 0:
            mismatched.append(uid)
            unexpected += got
    result = VerifyResult(
        total_expected=sum(expected.values()),
        total_arrived=sum(arrived.values()),
        lost=lost,
        duplicated=duplicated,
        mismatched_keys=tuple(sorted(mismatched)),
        unexpected=unexpected,
        kind="records",
    )
    log.debug("verify_records", lost=lost, duplicated=duplicated, unexpected=unexpected)
    return result


def compare_keyed(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> VerifyResult:
    """Per key, a deficit counts as lost and a surplus as duplicated (e.g. word counts).

    Missing keys lose their whole expected value; keys not expected count as unexpected. Values
    that are not numbers can only match or not: a difference is listed, without a count.
    """
    lost = duplicated = unexpected = 0
    total_expected = total_arrived = 0
    mismatched: list[str] = []
    notes: list[str] = []
    for key, want in expected.items():
        got = actual.get(key)
        if _is_number(want):
            total_expected += int(want)
        if got == want:
            if _is_number(got):
                total_arrived += int(got)
            continue
        mismatched.append(key)
        if got is None:
            lost += int(want) if _is_number(want) else 0
        elif _is_number(want) and _is_number(got):
            total_arrived += int(got)
            lost += max(int(want) - int(got), 0)
            duplicated += max(int(got) - int(want), 0)
        else:
            notes.append(f"{key}: expected {want!r}, got {got!r}")
    for key, got in actual.items():
        if key not in expected:
            mismatched.append(key)
            if _is_number(got):
                total_arrived += int(got)
                unexpected += int(got)
            else:
                notes.append(f"{key}: not expected, got {got!r}")
    return VerifyResult(
        total_expected=total_expected,
        total_arrived=total_arrived,
        lost=lost,
        duplicated=duplicated,
        mismatched_keys=tuple(sorted(mismatched)),
        unexpected=unexpected,
        kind="keyed",
        notes=tuple(notes),
    )


# ---------------------------------------------------------------------------------------------
# Helpers


def _stream_entries(client: redis.Redis, key: str, partition: int) -> Iterator[InputRecord]:
    cursor = "-"
    while True:
        page = client.xrange(key, min=cursor, max="+", count=_PAGE) or []
        for entry_id, values in page:
            fields = {_text(k): _text(v) for k, v in (values or {}).items()}
            ts = fields.pop("ts", None)
            yield InputRecord(
                partition=partition,
                entry_id=_text(entry_id),
                uid=fields.pop("uid", None),
                ts_ms=int(ts) if ts not in (None, "") else None,
                fields=fields,
            )
        if len(page) < _PAGE:
            return
        cursor = f"({_text(page[-1][0])}"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_or_text(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
