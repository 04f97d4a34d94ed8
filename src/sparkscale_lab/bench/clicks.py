"""The click records the file feed lands (filefeed.py) and the oracle expects (clickcheck.py): a
deterministic stream per seed, and event times as ISO 8601 UTC with milliseconds, the form Spark's
JSON reader parses as a timestamp."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

USERS = 20  # user key space: u00 .. u19
ITEMS = 50
# Page templates; `{item}` takes an item number. Sections (first path component, lower-cased):
# shop, search, account, help, home ("/").
PAGES = (
    "/Shop/item/{item}",
    "/shop/cart",
    "/Search/results",
    "/search?q={item}",
    "/Account/orders",
    "/HELP/faq",
    "/",
)
MS_RANGE = (5, 800)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_ms(epoch_ms: int) -> str:
    """`2025-01-01T00:00:01.250Z`: UTC with milliseconds, which Spark's JSON reader parses as a timestamp."""
    dt = EPOCH + timedelta(milliseconds=epoch_ms)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"


def parse_iso_ms(text: str) -> int:
    """Epoch milliseconds of an ISO 8601 timestamp (naive means UTC)."""
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


class ClickSource:
    """Deterministic click records: record n depends only on the seed and n (each record draws the
    same number of values from one seeded generator, in sequence order)."""

    def __init__(self, seed: int):
        self.seed = seed
        self._rng = random.Random(seed)
        self.next_seq = 0

    def next(self, ts_ms: int) -> dict[str, Any]:
        rng = self._rng
        user = rng.randrange(USERS)
        template = PAGES[rng.randrange(len(PAGES))]
        item = rng.randrange(ITEMS)
        ms = rng.randint(*MS_RANGE)
        record = {
            "event_id": f"{self.seed}-{self.next_seq}",
            "user": f"u{user:02d}",
            "page": template.format(item=item),
            "ts": iso_ms(ts_ms),
            "ms": ms,
        }
        self.next_seq += 1
        return record
