"""Notifier against a real AF_UNIX datagram socket standing in for systemd's notify socket."""

from __future__ import annotations

import os
import socket
import time

import pytest
from structlog.testing import capture_logs

from sparkscale.daemon.notify import Notifier


@pytest.fixture
def notify_socket(tmp_path, monkeypatch):
    """A bound SOCK_DGRAM socket, and NOTIFY_SOCKET pointing at it (as systemd sets it)."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    yield sock
    sock.close()


def _received(sock: socket.socket) -> str:
    return sock.recv(4096).decode()


def _nothing_more(sock: socket.socket) -> None:
    sock.settimeout(0.1)
    with pytest.raises(TimeoutError):
        sock.recv(4096)


def test_sends_the_exact_datagrams(notify_socket):
    notifier = Notifier()
    assert notifier.enabled

    notifier.ready("managing 2 apps")
    assert _received(notify_socket) == "READY=1\nSTATUS=managing 2 apps"
    notifier.ready()
    assert _received(notify_socket) == "READY=1"
    notifier.status("cycle 7")
    assert _received(notify_socket) == "STATUS=cycle 7"
    notifier.watchdog()
    assert _received(notify_socket) == "WATCHDOG=1"

    before_us = time.monotonic_ns() // 1000
    notifier.reloading()
    first, second = _received(notify_socket).split("\n")
    after_us = time.monotonic_ns() // 1000
    assert first == "RELOADING=1"
    key, value = second.split("=")
    assert key == "MONOTONIC_USEC" and before_us <= int(value) <= after_us
    notifier.ready("managing 3 apps")
    assert _received(notify_socket) == "READY=1\nSTATUS=managing 3 apps"

    notifier.stopping()
    assert _received(notify_socket) == "STOPPING=1"
    _nothing_more(notify_socket)


def test_send_failure_never_raises_and_warns_once(tmp_path, monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens.sock"))
    notifier = Notifier()
    assert notifier.enabled
    with capture_logs() as logs:
        notifier.ready("up")
        notifier.watchdog()
        notifier.stopping()
    assert [e["event"] for e in logs] == ["systemd.notify_failed"]
    assert logs[0]["log_level"] == "warning"


def test_reconnects_once_the_socket_exists(tmp_path, monkeypatch):
    path = tmp_path / "late.sock"
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    notifier = Notifier()
    notifier.watchdog()  # no socket yet: dropped silently (after one warning)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    try:
        notifier.watchdog()
        assert _received(sock) == "WATCHDOG=1"
    finally:
        sock.close()


def test_without_notify_socket_everything_is_a_no_op(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    notifier = Notifier()
    assert not notifier.enabled
    assert notifier.watchdog_interval_s is None
    notifier.ready("up")
    notifier.reloading()
    notifier.status("x")
    notifier.watchdog()
    notifier.stopping()
    assert notifier._sd is None  # never even opened a socket


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        ("60000000", None, 30.0),  # WatchdogSec=60: ping every 30 s
        ("60000000", "self", 30.0),
        ("60000000", "other", None),  # the watchdog belongs to another process (we are its child)
        ("1500000", None, 0.75),
        ("0", None, None),
        ("garbage", None, None),
        (None, None, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec(monkeypatch, usec, pid, expected):
    if usec is None:
        monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    else:
        monkeypatch.setenv("WATCHDOG_USEC", usec)
    if pid is None:
        monkeypatch.delenv("WATCHDOG_PID", raising=False)
    else:
        monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() if pid == "self" else os.getpid() + 1))
    assert Notifier().watchdog_interval_s == expected


def test_abstract_socket_address(monkeypatch):
    """NOTIFY_SOCKET=@name is a socket in the abstract namespace (systemd in containers uses these)."""
    name = f"sparkscale-test-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    try:
        Notifier().ready("up")
        assert _received(sock) == "READY=1\nSTATUS=up"
    finally:
        sock.close()
