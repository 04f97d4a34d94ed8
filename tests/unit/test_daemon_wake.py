"""Waking an app's cycle early (a manual request arrived) from a cycle or kazoo thread: it must
bring the cycle forward, and must never hang the daemon's stop. No servers: the Daemon's Redis and
ZooKeeper clients are created but never used here."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from apscheduler.schedulers.base import STATE_STOPPED

from sparkscale.config import Config
from sparkscale.daemon.service import Daemon
from tests.conftest import wait_until


def test_a_woken_app_runs_its_next_cycle_now():
    daemon = Daemon(Config())
    later = datetime.now(UTC) + timedelta(hours=1)
    daemon.scheduler.add_job(lambda: None, "interval", hours=2, id="cycle:x", next_run_time=later)
    daemon.scheduler.start(paused=True)
    try:
        daemon._wake_app("x")
        daemon._wake_app("gone")  # an app removed meanwhile is ignored
        assert daemon._wake.is_set()
        daemon._run_woken_apps()
        assert daemon.scheduler.get_job("cycle:x").next_run_time <= datetime.now(UTC)
        assert daemon._apps_to_wake == set()
    finally:
        daemon.scheduler.shutdown(wait=False)


def test_a_cycle_that_wakes_an_app_while_the_daemon_stops_does_not_hang_the_stop():
    """APScheduler's shutdown(wait=True) holds its job-store lock while it waits for running jobs;
    a wake that touched the scheduler from the running cycle waited on that lock for ever (seen as a
    daemon that ignored SIGTERM after taking over a migration, until it was SIGKILLed)."""
    daemon = Daemon(Config())
    daemon.scheduler.add_job(lambda: None, "interval", hours=1, id="cycle:x")
    running = threading.Event()
    woke = threading.Event()

    def cycle() -> None:
        running.set()
        wait_until(lambda: daemon.scheduler.state == STATE_STOPPED, 30, "the shutdown to begin")
        daemon._wake_app("x")
        woke.set()

    # An interval job like the daemon's cycles (a one-shot job's removal after its run races the
    # shutdown inside APScheduler itself, which is not what this test is about).
    daemon.scheduler.add_job(cycle, "interval", hours=1, id="cycle:waker",
                             next_run_time=datetime.now(UTC))
    daemon.scheduler.start()
    wait_until(running.is_set, 30, "the cycle to run")
    shutdown = threading.Thread(target=daemon.scheduler.shutdown, kwargs={"wait": True}, daemon=True)
    shutdown.start()
    shutdown.join(30)
    assert not shutdown.is_alive(), "the scheduler's shutdown is stuck behind a cycle waking an app"
    assert woke.is_set()
    assert daemon._apps_to_wake == {"x"}  # left for the main loop, which is ending: nothing runs


def test_the_apps_first_cycles_are_spread_over_one_interval():
    from sparkscale.daemon.service import staggered_offsets_s

    assert staggered_offsets_s(0, 10.0) == []
    assert staggered_offsets_s(1, 10.0) == [0.0]
    assert staggered_offsets_s(4, 10.0) == [0.0, 2.5, 5.0, 7.5]


def test_an_app_added_with_an_offset_has_its_first_cycle_that_much_later():
    daemon = Daemon(Config())
    daemon.scheduler.start(paused=True)
    try:
        before = datetime.now(UTC)
        daemon._add_app(Config.model_validate({"apps": [{"name": "a"}]}).apps[0], 7.5)
        first = daemon.scheduler.get_job("cycle:a").next_run_time
        assert before + timedelta(seconds=7.5) <= first <= datetime.now(UTC) + timedelta(seconds=7.5)
    finally:
        daemon.scheduler.shutdown(wait=False)


def test_a_sigterm_taken_by_another_thread_still_stops_the_daemon():
    """The kernel may deliver SIGTERM to any thread; Python runs the handler on the main thread only
    when it next runs, so a main loop asleep without a timeout slept through its stop (the daemon
    was SIGKILLed after taking over a migration). Here the signal lands on a helper thread."""
    import signal

    daemon = Daemon(Config.model_validate({"metrics": {"enabled": False}}))
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    sent, rescued = threading.Event(), threading.Event()

    def signal_from_another_thread() -> None:
        wait_until(lambda: daemon.scheduler.running, 30, "the daemon to run")
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # handled on this thread, not main
        sent.set()
        if not daemon._stop.wait(10):  # the main loop never noticed: wake it so the test can end
            rescued.set()
            daemon.stop("test rescue")

    helper = threading.Thread(target=signal_from_another_thread, daemon=True)
    helper.start()
    try:
        assert daemon.run() == 0
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    helper.join(30)
    assert sent.is_set() and not rescued.is_set(), "the daemon slept through a SIGTERM handled off its main thread"


def test_a_taken_metrics_port_ends_the_start_with_a_message_and_exit_3(monkeypatch):
    """Another process on the metrics port: `sparkscale run` says which address and what to change,
    exits 3 (the environment), with no traceback and nothing started."""
    import socket

    from click.testing import CliRunner

    from sparkscale.cli import main
    from sparkscale.config import identities

    monkeypatch.setattr(identities, "_process", list(identities._process))  # `run` sets the process's identity

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = CliRunner().invoke(main, ["run", "--set", f"metrics.port={port}", "--set", "metrics.host=127.0.0.1",
                                        "--max-cycles", "1"])
    assert out.exit_code == 3, out.output
    assert f"cannot serve metrics on 127.0.0.1:{port}" in out.output and "metrics.port" in out.output, out.output
    assert "Traceback" not in out.output
