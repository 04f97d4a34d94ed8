"""systemd's notify protocol (sd_notify(3)) for `Type=notify`: READY, RELOADING, STOPPING, STATUS, WATCHDOG.

Outside systemd (no NOTIFY_SOCKET) every call is a cheap no-op, so the daemon needs no special mode.
A failed send never raises: systemd then restarts or times the unit out on its own, which is the
right outcome, whereas an exception would take down a loop that is otherwise working.
"""

from __future__ import annotations

import os
import threading
import time

import sdnotify
import structlog

log = structlog.get_logger(__name__)


class Notifier:
    """One connection to systemd's notification socket, opened on the first send."""

    def __init__(self) -> None:
        # Read once: systemd sets it before exec, and the daemon never changes its environment.
        self._address = os.environ.get("NOTIFY_SOCKET") or None
        self._sd: sdnotify.SystemdNotifier | None = None
        self._lock = threading.Lock()  # the watchdog job pings from the scheduler's thread
        self._warned = False

    @property
    def enabled(self) -> bool:
        """True when running under systemd with a notify socket (Type=notify)."""
        return self._address is not None

    @property
    def watchdog_interval_s(self) -> float | None:
        """Half of WatchdogSec= (ping twice per period, as sd_watchdog_enabled(3) advises); None without one.

        WATCHDOG_PID names the process systemd expects pings from; a child that inherited the
        variables must not think the watchdog is its own.
        """
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        if not usec or (pid and pid != str(os.getpid())):
            return None
        try:
            value = int(usec)
        except ValueError:
            return None
        return value / 1e6 / 2 if value > 0 else None

    def ready(self, status: str = "") -> None:
        """Startup (or a reload) is complete; `status` is what `systemctl status` shows."""
        self._send("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def reloading(self) -> None:
        """A reload has begun; call `ready()` when it is over (whether the new config was taken or not)."""
        # MONOTONIC_USEC lets systemd (>= 253) tell this reload apart from an earlier one.
        self._send(f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> None:
        self._send("STOPPING=1")

    def status(self, text: str) -> None:
        self._send(f"STATUS={text}")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    def _send(self, message: str) -> None:
        if self._address is None:
            return
        with self._lock:
            try:
                if self._sd is None:
                    # debug=True: sdnotify swallows every error otherwise, and we want to log it (once).
                    self._sd = sdnotify.SystemdNotifier(debug=True)
                self._sd.notify(message)
            except Exception as exc:  # a notification must never stop the daemon
                # Reconnect on the next send: the socket may have been missing only for a moment.
                if self._sd is not None and self._sd.socket is not None:
                    self._sd.socket.close()
                self._sd = None
                if not self._warned:
                    self._warned = True
                    log.warning("systemd.notify_failed", socket=self._address, error=repr(exc),
                                message=message.split("\n", 1)[0], note="further failures are not logged")
