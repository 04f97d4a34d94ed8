"""The one place the control loop's events go (Flink's `AutoScalerEventHandler`).

The autoscaler, the outcome judge and the background executor all emit to the same sink; the
daemon makes it a `FanOut` over its feeds. A feed that raises (the action log refusing an
outcome) ends the emit: the caller's cycle fails as it would have failed writing it itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from sparkscale.control.events import Event


class EventSink(Protocol):
    def emit(self, event: Event) -> None:
        ...


@dataclass(frozen=True)
class FanOut:
    """Hands each event to every feed, in order: the action log before the metrics and the log,
    so that an outcome Redis refused is neither counted nor logged as recorded."""

    feeds: tuple[EventSink, ...]

    def emit(self, event: Event) -> None:
        for feed in self.feeds:
            feed.emit(event)
