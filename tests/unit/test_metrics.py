"""DaemonMetrics: the samples GET /metrics returns, series removal, and separate registries."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkscale.daemon.metrics import DaemonMetrics


def _samples(text: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, frozenset of label items): value} of an exposition."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def _fill(metrics: DaemonMetrics, app: str = "wordcount") -> None:
    metrics.count_cycle(app, "ok")
    metrics.count_cycle(app, "ok")
    metrics.count_cycle(app, "standby")
    metrics.observe_cycle(app, 0.07)
    metrics.observe_cycle(app, 3.0)
    metrics.count_decision_write_failure(app)
    metrics.count_decision(app, "ds2", True)
    metrics.count_decision(app, "ds2", False)
    metrics.count_decision(app, "ds2", False)
    metrics.count_action(app, "scale_executors", "done")
    metrics.count_action(app, "set_parallelism", "dry_run")
    metrics.set_executors(app, 4)
    metrics.set_parallelism(app, {"split": 3, "count": 6})
    metrics.set_leader(app, True)
    metrics.set_blocked(app, 2)


@pytest.fixture
def metrics():
    m = DaemonMetrics()
    yield m
    m.close()


def test_served_exposition_has_the_samples(metrics):
    _fill(metrics)
    port = metrics.serve("127.0.0.1", 0)
    assert port > 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()

    s = _samples(text)
    assert _value(s, "sparkscale_cycles_total", app="wordcount", result="ok") == 2
    assert _value(s, "sparkscale_cycles_total", app="wordcount", result="standby") == 1
    assert _value(s, "sparkscale_decision_write_failures_total", app="wordcount") == 1
    assert _value(s, "sparkscale_decisions_total", app="wordcount", policy="ds2", changes="true") == 1
    assert _value(s, "sparkscale_decisions_total", app="wordcount", policy="ds2", changes="false") == 2
    assert _value(s, "sparkscale_actions_total", app="wordcount", type="scale_executors", outcome="done") == 1
    assert _value(s, "sparkscale_actions_total", app="wordcount", type="set_parallelism", outcome="dry_run") == 1
    assert _value(s, "sparkscale_cycle_duration_seconds_count", app="wordcount") == 2
    assert _value(s, "sparkscale_cycle_duration_seconds_sum", app="wordcount") == pytest.approx(3.07)
    assert _value(s, "sparkscale_cycle_duration_seconds_bucket", app="wordcount", le="0.05") == 0
    assert _value(s, "sparkscale_cycle_duration_seconds_bucket", app="wordcount", le="0.1") == 1
    assert _value(s, "sparkscale_cycle_duration_seconds_bucket", app="wordcount", le="5.0") == 2
    assert _value(s, "sparkscale_cycle_duration_seconds_bucket", app="wordcount", le="60.0") == 2
    assert _value(s, "sparkscale_cycle_duration_seconds_bucket", app="wordcount", le="+Inf") == 2
    assert _value(s, "sparkscale_executors", app="wordcount") == 4
    assert _value(s, "sparkscale_parallelism", app="wordcount", operator="split") == 3
    assert _value(s, "sparkscale_parallelism", app="wordcount", operator="count") == 6
    assert _value(s, "sparkscale_leader", app="wordcount") == 1
    assert _value(s, "sparkscale_blocked_actions", app="wordcount") == 2
    # The exact exposition lines, as a Prometheus server or `curl | grep` sees them.
    assert 'sparkscale_cycles_total{app="wordcount",result="ok"} 2.0' in text.splitlines()
    assert 'sparkscale_leader{app="wordcount"} 1.0' in text.splitlines()
    # What render() returns is what is served.
    assert _samples(metrics.render().decode()).keys() == s.keys()


def test_standby_and_parallelism_replacement(metrics):
    metrics.set_leader("wordcount", True)
    metrics.set_leader("wordcount", False)
    metrics.set_parallelism("wordcount", {"split": 3, "count": 6})
    metrics.set_parallelism("wordcount", {"split": 4, "sink": 1})
    s = _samples(metrics.render().decode())
    assert _value(s, "sparkscale_leader", app="wordcount") == 0
    operators = {dict(labels)["operator"]: v for (name, labels), v in s.items() if name == "sparkscale_parallelism"}
    assert operators == {"split": 4, "sink": 1}


def test_forget_app_removes_only_that_apps_series(metrics):
    _fill(metrics, "wordcount")
    _fill(metrics, "taxi")
    metrics.forget_app("wordcount")
    text = metrics.render().decode()
    assert 'app="wordcount"' not in text
    s = _samples(text)
    assert _value(s, "sparkscale_cycles_total", app="taxi", result="ok") == 2
    assert _value(s, "sparkscale_parallelism", app="taxi", operator="count") == 6
    assert _value(s, "sparkscale_cycle_duration_seconds_count", app="taxi") == 2
    # The app coming back (a later reload) starts from zero.
    metrics.count_cycle("wordcount", "ok")
    metrics.set_parallelism("wordcount", {"split": 1})
    s = _samples(metrics.render().decode())
    assert _value(s, "sparkscale_cycles_total", app="wordcount", result="ok") == 1
    assert _value(s, "sparkscale_parallelism", app="wordcount", operator="split") == 1
    metrics.forget_app("never-seen")  # no error


def test_two_instances_do_not_clash():
    first, second = DaemonMetrics(), DaemonMetrics()  # the global registry would raise "Duplicated timeseries"
    try:
        first.count_cycle("wordcount", "ok")
        second.count_cycle("wordcount", "ok")
        second.count_cycle("wordcount", "ok")
        assert _value(_samples(first.render().decode()), "sparkscale_cycles_total", app="wordcount", result="ok") == 1
        assert _value(_samples(second.render().decode()), "sparkscale_cycles_total", app="wordcount",
                      result="ok") == 2
        port_1, port_2 = first.serve("127.0.0.1", 0), second.serve("127.0.0.1", 0)
        assert port_1 != port_2
        with urllib.request.urlopen(f"http://127.0.0.1:{port_2}/metrics", timeout=5) as resp:
            assert 'sparkscale_cycles_total{app="wordcount",result="ok"} 2.0' in resp.read().decode()
    finally:
        first.close()
        second.close()


def test_close_frees_the_port_and_is_idempotent(metrics):
    port = metrics.serve("127.0.0.1", 0)
    metrics.close()
    metrics.close()
    with pytest.raises(OSError, match="Connection refused"):  # nothing listens on the port any more
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    # The same instance can serve again once closed.
    assert metrics.serve("127.0.0.1", 0) > 0
