"""Issue 32, the store seam: nothing read from Redis, ZooKeeper or a driver is trusted. One test per
probe (a driver URL, an executor shape, a checkpoint path, a manual request, an agent epoch, a
failing cycle or reload), on the in-memory fakes; and property tests: each parser of a stored
record returns a model or refuses it with one of bad_records.PROBLEMS, never anything else."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import fakeredis
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

import sparkscale.redisconn
from sparkscale.agent.admission import CommandGate, parse_epoch
from sparkscale.config import ActionLogConfig, Config
from sparkscale.control.events import CycleEnded, Event
from sparkscale.control.state import AppState
from sparkscale.daemon import manual, service
from sparkscale.daemon.wiring import RequestDesk
from sparkscale.model.executor_shape import ExecutorShape
from sparkscale.model.manual_request import ManualRequest, ManualResult
from sparkscale.monitors import collector
from sparkscale.monitors.spark_rest import SparkRestClient, SparkRestError, driver_rest
from sparkscale.protocol.keys import driver_key, shape_key
from sparkscale.protocol.queries import QUERY_INFO_JSON, QueryInfo, queries_key
from sparkscale.protocol.znodes import agent_epoch_path
from sparkscale.store import driver_urls
from sparkscale.store.bad_records import PROBLEMS, escaped
from sparkscale.store.checkpoint_paths import checkpoint_refusal
from sparkscale.store.driver_urls import AgentHosts, agent_hosts, configured_hosts, url_refusal
from sparkscale.store.live import live_store
from sparkscale.store.redis_shapes import parse_shape
from sparkscale.store.zk_requests import parse_request
from tests.unit.fake_redis import fake_redis, make_wrong_type, server
from tests.unit.fakezk import FakeZk
from tests.unit.test_autoscaler import APP, NO_CHANGE, RecordingSink, loop
from tests.unit.test_store import PREFIX, ROOT

PROPERTY = settings(max_examples=60, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
T = 1_800_000_000.0


def _bad_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == "store.bad_record"]


# -- 1. the driver REST URL ----------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "problem"), [
    ("file:///etc/passwd", "scheme 'file' is not http or https"),
    ("gopher://127.0.0.1:70/", "scheme 'gopher'"),
    ("http://user:pw@127.0.0.1:4040", "names a user"),
    ("http://127.0.0.1", "names no port"),
    ("http://127.0.0.1:99999", "not a URL"),
    ("http://169.254.169.254:80/latest/meta-data", "host 169.254.169.254 is not one"),
    ("http://127.0.0.1:4040/?x=1", "query or fragment"),
    ("http://127.0.0.1:4040/\nforged: line", "control or space"),
    ("http://[::1:4040", "not a URL"),
    (["http://127.0.0.1:4040"], "not a string"),
    ("http://127.0.0.1:4040" + "/a" * 2000, "longer than"),
])
def test_a_driver_url_that_is_not_http_to_a_vouched_host_is_refused(url: object, problem: str) -> None:
    refusal = url_refusal(url, {"127.0.0.1"})
    assert refusal is not None and problem in refusal


def test_a_driver_url_to_a_vouched_host_and_port_is_opened() -> None:
    assert url_refusal("http://127.0.0.1:4040", {"127.0.0.1"}) is None
    assert url_refusal("HTTPS://Driver.Example:4443/", {"driver.example"}) is None
    assert url_refusal("http://[::1]:4040", {"::1"}) is None


def test_loopback_under_another_name_is_the_same_host_only_when_loopback_is_vouched_for() -> None:
    # A driver bound to 127.0.0.1 registers its UI as http://localhost:4040 (found by `sparkscale demo`).
    assert url_refusal("http://localhost:4040", {"127.0.0.1"}) is None
    assert url_refusal("http://127.0.0.2:4040", {"localhost"}) is None
    assert url_refusal("http://[::1]:4040", {"127.0.0.1"}) is None
    # A config that names no loopback host does not let a driver point the daemon at its own host.
    assert url_refusal("http://localhost:4040", {"10.0.0.5"}) is not None
    assert url_refusal("http://127.0.0.1:6379", {"driver.example"}) is not None


def test_the_config_vouches_for_its_driver_master_and_worker_hosts_or_its_allow_list_only() -> None:
    cfg = Config.model_validate({"spark": {"driver_host": "10.0.0.5", "driver_bind_address": "0.0.0.0",
                                           "master_url": "spark://10.0.0.1:7077"},
                                 "cluster": {"workers": 2, "worker_hosts": ["127.0.0.2", "127.0.0.3"]}})
    assert configured_hosts(cfg) == {"10.0.0.5", "10.0.0.1", "127.0.0.2", "127.0.0.3"}  # 0.0.0.0 binds, no host
    allowed = cfg.model_copy(update={"spark": cfg.spark.model_copy(update={"driver_hosts_allowed": ["10.9.9.9"]})})
    assert configured_hosts(allowed) == {"10.9.9.9"}
    with pytest.raises(ValueError, match=r"driver_hosts_allowed\[0\]"):
        Config.model_validate({"spark": {"driver_hosts_allowed": ["a host"]}})


def test_the_hosts_an_agent_registered_are_read_from_its_record_and_garbage_names_none() -> None:
    record = json.dumps({"driver_host": "10.1.2.3", "ui_url": "http://Driver-7:4040"}).encode()
    assert agent_hosts(record) == {"10.1.2.3", "driver-7"}
    for garbage in (b"", b"[1]", b"{not json", b"\xff", b'{"driver_host": 5, "ui_url": "http://[x"}', None):
        assert agent_hosts(garbage) == frozenset()


@given(st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()))
@PROPERTY
def test_parsing_an_agent_record_never_raises(data: bytes) -> None:
    assert isinstance(agent_hosts(data), frozenset)


def _registered(app: str, ui_url: str) -> fakeredis.FakeRedis:
    """A Redis whose only key is the app's driver record (read alone, or in a pipeline: the collector's)."""
    return fake_redis(strings={driver_key(PREFIX, app): json.dumps({"app": app, "ui_url": ui_url})})


@pytest.fixture
def no_agents(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No agent znode to vouch for a host (the apps it was asked about), and no URL ever opened."""
    asked: list[str] = []

    def read(cfg: Config, app: str) -> bytes | None:
        asked.append(app)
        return None

    monkeypatch.setattr(driver_urls, "read_agent_record", read)
    monkeypatch.setattr(driver_urls, "AGENTS", AgentHosts())

    def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a refused URL was opened")

    monkeypatch.setattr(driver_urls.OPENER, "open", never)
    return asked


def _decoding_reader_of(key: str, raw: bytes) -> fakeredis.FakeRedis:
    """A client decoding as `connect`'s do, of a server holding `raw` bytes as written at `key`."""
    shared = server()
    fakeredis.FakeRedis(server=shared).set(key, raw)
    return fakeredis.FakeRedis(server=shared, decode_responses=True,
                               encoding_errors=sparkscale.redisconn.ENCODING_ERRORS)


def _config(app: str) -> Config:
    return Config.model_validate({"apps": [{"name": app, "pipeline": "wordcount"}]})


def test_a_file_url_in_redis_is_never_opened_logged_once_and_the_app_reads_as_unreachable(
        monkeypatch: pytest.MonkeyPatch, no_agents: list[str]) -> None:
    cfg = _config("filer")
    monkeypatch.setattr(sparkscale.redisconn, "connect", lambda _cfg, *_a, **_k: _registered("filer", "file:///etc/passwd"))
    with capture_logs() as logs:
        for _ in range(2):
            with pytest.raises(SparkRestError, match="registered REST URL is refused: scheme 'file'") as info:
                driver_rest(cfg, cfg.app("filer"))
            assert info.value.unreachable
        # The cycle's collector reads it as an app not running: the cycle goes on, other apps unaffected.
        with pytest.raises(collector.AppNotRunningError):
            collector.collect_snapshots(cfg, "filer")
    bad = _bad_lines(logs)
    assert [(e["key"], e["record"]) for e in bad] == [(driver_key(PREFIX, "filer"), "file:///etc/passwd")]
    assert no_agents == []  # a bad scheme needs no ZooKeeper read


def test_a_driver_record_that_is_not_utf8_is_a_named_bad_record_not_a_decode_error(
        monkeypatch: pytest.MonkeyPatch, no_agents: list[str]) -> None:
    cfg = _config("garbled")
    # Strict decoding raised UnicodeDecodeError here, in any reader.
    reader = _decoding_reader_of(driver_key(PREFIX, "garbled"),
                                 b'{"app": "garbled", "ui_url": "http://127.0.0.1:40\xff40"}')
    monkeypatch.setattr(sparkscale.redisconn, "connect", lambda _cfg, *_a, **_k: reader)
    with capture_logs() as logs:
        with pytest.raises(SparkRestError) as info:
            driver_rest(cfg, cfg.app("garbled"))
        assert info.value.unreachable
        with pytest.raises(collector.AppNotRunningError):
            collector.collect_snapshots(cfg, "garbled")
    assert [e["key"] for e in _bad_lines(logs)] == [driver_key(PREFIX, "garbled")]


def test_a_url_to_a_host_nobody_vouches_for_is_refused_unless_the_agent_registered_it(
        monkeypatch: pytest.MonkeyPatch, no_agents: list[str]) -> None:
    cfg = _config("forger")
    forged = "http://10.66.0.1:8080\u001b[2J"
    monkeypatch.setattr(sparkscale.redisconn, "connect", lambda _cfg, *_a, **_k: _registered("forger", "http://10.66.0.1:8080"))
    with capture_logs() as logs, pytest.raises(SparkRestError, match=r"host 10\.66\.0\.1 is not one"):
        driver_rest(cfg, cfg.app("forger"))
    assert no_agents == ["forger"] and len(_bad_lines(logs)) == 1
    # The agent's own znode names that host: the URL is its driver's.
    record = json.dumps({"driver_host": "10.66.0.1", "ui_url": "http://10.66.0.1:8080"}).encode()
    monkeypatch.setattr(driver_urls, "read_agent_record", lambda _cfg, _app: record)
    monkeypatch.setattr(driver_urls, "AGENTS", AgentHosts())
    assert driver_rest(cfg, cfg.app("forger")).base_url == "http://10.66.0.1:8080/api/v1"
    assert escaped(forged) == "http://10.66.0.1:8080\\x1b[2J"  # what a log line would show of a forged one


class _Redirecting(BaseHTTPRequestHandler):
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        type(self).seen.append(self.path)
        self.send_response(302)
        self.send_header("Location", "http://169.254.169.254:80/latest/meta-data")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_redirect_from_a_driver_is_an_error_never_followed() -> None:
    _Redirecting.seen = []
    server = HTTPServer(("127.0.0.1", 0), _Redirecting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = SparkRestClient(f"http://127.0.0.1:{server.server_port}/api/v1", timeout_s=2, retries=2)
        with pytest.raises(SparkRestError, match="HTTP 302") as info:
            client.get_json("applications")
        assert info.value.status == 302 and _Redirecting.seen == ["/api/v1/applications"]
    finally:
        server.shutdown()
        server.server_close()


@given(st.text(max_size=80) | st.binary(max_size=80).map(lambda b: b.decode("latin-1")))
@PROPERTY
def test_judging_any_url_or_checkpoint_path_never_raises(text: str) -> None:
    for url in (text, "http://127.0.0.1:1/" + text, "http://" + text):
        refusal = url_refusal(url, {"127.0.0.1"})
        assert refusal is None or (isinstance(refusal, str) and refusal)
    for path in (text, "/" + text, "hdfs://" + text):
        refusal = checkpoint_refusal(path, "/run/ck")
        assert refusal is None or (isinstance(refusal, str) and refusal)


@given(st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()))
@PROPERTY
def test_any_driver_record_in_redis_is_a_client_or_an_unreachable_driver(record: bytes) -> None:
    cfg = _config("anyrec")
    with pytest.MonkeyPatch.context() as mp:
        reader = _decoding_reader_of(driver_key(PREFIX, "anyrec"), record)
        mp.setattr(sparkscale.redisconn, "connect", lambda _cfg, *_a, **_k: reader)
        mp.setattr(driver_urls, "read_agent_record", lambda _cfg, _app: None)
        mp.setattr(driver_urls, "AGENTS", AgentHosts())
        outcome: SparkRestClient | SparkRestError
        try:
            outcome = driver_rest(cfg, cfg.app("anyrec"))
        except SparkRestError as exc:
            outcome = exc
    if isinstance(outcome, SparkRestError):
        assert outcome.unreachable
    else:
        assert outcome.base_url.startswith(("http://", "https://"))


# -- 2. the executor shape -------------------------------------------------------------------------------


@pytest.mark.parametrize("cores", ["two", "-1", "0", "99999999999", "9" * 5001, "1e3", " 2", "2.0", ""])
def test_a_poisoned_shape_is_read_as_none_logged_once_and_the_config_shape_holds(cores: str) -> None:
    redis_ = fake_redis()
    shapes = live_store(redis_, PREFIX, FakeZk(), ROOT, ActionLogConfig()).shapes  # type: ignore[arg-type]
    redis_.hset(shape_key(PREFIX, "clicks"), mapping={"executor_cores": cores, "executor_memory_mb": "512",
                                                      "migration": "mig-9"})
    with capture_logs() as logs:
        assert shapes.stored_shape("clicks") is None and shapes.stored_shape("clicks") is None
    assert [(e["key"], e["record"]) for e in _bad_lines(logs)] == [(shape_key(PREFIX, "clicks"), "mig-9")]


def test_a_shape_key_that_is_not_a_hash_is_a_bad_record_not_a_failed_cycle() -> None:
    client = fake_redis()
    shapes = live_store(client, PREFIX, FakeZk(), ROOT, ActionLogConfig()).shapes  # type: ignore[arg-type]
    make_wrong_type(client, shape_key(PREFIX, "clicks"))
    with capture_logs() as logs:
        assert shapes.stored_shape("clicks") is None
    assert len(_bad_lines(logs)) == 1


@given(st.dictionaries(st.sampled_from(["executor_cores", "executor_memory_mb", "migration", "x"]),
                       st.text(max_size=30) | st.integers().map(str), max_size=4))
@PROPERTY
def test_parsing_a_stored_shape_returns_a_bounded_shape_or_refuses_it(raw: dict[str, str]) -> None:
    try:
        shape = parse_shape(raw)
    except PROBLEMS:
        return
    assert isinstance(shape, ExecutorShape) and 1 <= shape.executor_cores <= 10_000
    assert 1 <= shape.executor_memory_mb <= 1 << 22


# -- 3. the checkpoint path ------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "problem"), [
    ("relative/dir", "neither an absolute path nor a URI"),
    ("/ok/../../etc", "'..' segment"),
    ("/tmp/ck\x00pt", "control character"),
    ("javascript:alert(1)", "scheme 'javascript'"),
    ("hdfs://nn:8020/ck?x", "query, fragment or user"),
    ("s3a:relative", "names no absolute path"),
    ("/" + "a" * 5000, "longer than"),
    (5, "not a non-empty string"),
    ("/elsewhere/ck", "not inside the checkpoint root /run/ck"),
    ("hdfs://nn:8020/run/ck/q", "not inside the checkpoint root /run/ck"),
])
def test_a_checkpoint_path_out_of_bounds_is_refused(path: object, problem: str) -> None:
    refusal = checkpoint_refusal(path, "/run/ck" if "inside" in problem else None)
    assert refusal is not None and problem in refusal


@pytest.mark.parametrize("path", ["/run/ck/q", "file:/run/ck/q", "file:///run/ck/q/", "/run/ck"])
def test_a_checkpoint_path_in_bounds_is_used(path: str) -> None:
    assert checkpoint_refusal(path) is None and checkpoint_refusal(path, "/run/ck") is None
    assert checkpoint_refusal("hdfs://NN:8020/ck/q", "hdfs://nn:8020/ck") is None


def test_a_published_query_with_a_bad_checkpoint_is_kept_with_its_checkpoint_unknown() -> None:
    client = fake_redis()
    store = live_store(client, PREFIX, FakeZk(), ROOT, ActionLogConfig())  # type: ignore[arg-type]
    info = QueryInfo("q", "id-1", "run-1", "active", checkpoint="/ck/../../../home/user")
    client.hset(queries_key(PREFIX, "clicks"), "q", QUERY_INFO_JSON.dumps(info))
    with capture_logs() as logs:
        for _ in range(2):
            read = store.queries.read_queries("clicks")
            assert read["q"].checkpoint is None and read["q"].id == "id-1"
            assert not read["q"].migratable
    assert [e["record"] for e in _bad_lines(logs)] == ["q.checkpoint"]


@given(st.dictionaries(st.text(max_size=8), st.text(max_size=60) | JSON.map(json.dumps), max_size=3))
@PROPERTY
def test_any_published_query_hash_reads_as_queries_with_bounded_checkpoints(published: dict[str, str]) -> None:
    client = fake_redis(hashes={queries_key(PREFIX, "clicks"): published})
    store = live_store(client, PREFIX, FakeZk(), ROOT, ActionLogConfig())  # type: ignore[arg-type]
    for info in store.queries.read_queries("clicks").values():
        assert info.checkpoint is None or checkpoint_refusal(info.checkpoint) is None


# -- 4. the manual request ------------------------------------------------------------------------------

REQUEST = {"to": 3, "by": "op", "requested_at": T, "expires_at": T + 60}


@pytest.mark.parametrize("body", [
    b"[]", b'{"to": Infinity, "by": "op", "requested_at": 1, "expires_at": 2}',
    json.dumps({**REQUEST, "expires_at": "nan"}).encode(), json.dumps({**REQUEST, "expires_at": "inf"}).encode(),
    json.dumps({**REQUEST, "expires_at": 1e400}).encode().replace(b"Infinity", b"1e400"),
    json.dumps({**REQUEST, "to": "3"}).encode(), json.dumps({**REQUEST, "to": 10**7}).encode(),
    json.dumps({**REQUEST, "executors": -1}).encode(),
    json.dumps({**REQUEST, "type": "migrate", "shape": {"executor_cores": 2, "executor_memory_mb": 10**9}}).encode(),
    b'{"to": ' + b"9" * 5001 + b', "by": "op", "requested_at": 1, "expires_at": 2}',
    b"[" * 5000 + b"]" * 5000, b"\xff\xfe",
])
def test_a_malformed_request_is_refused_at_the_seam(body: bytes) -> None:
    with pytest.raises(PROBLEMS):
        parse_request("req-1", body)


@given(st.binary(max_size=300) | JSON.map(lambda v: json.dumps(v).encode())
       | st.fixed_dictionaries({}, optional={"to": JSON, "by": JSON, "requested_at": JSON, "expires_at": JSON,
                                            "type": JSON, "executors": JSON, "shape": JSON}).map(
           lambda v: json.dumps(v).encode()))
@PROPERTY
def test_parsing_a_request_znode_returns_a_bounded_request_or_refuses_it(data: bytes) -> None:
    try:
        request = parse_request("req-1", data)
    except PROBLEMS:
        return
    assert isinstance(request, ManualRequest)
    assert 0 <= request.requested_at <= 1e11 and 0 <= request.expires_at <= 1e11


def _desk(contexts: Any = None) -> tuple[RequestDesk, Any, FakeZk]:
    zk = FakeZk()
    store = live_store(fake_redis(), PREFIX, zk, ROOT, ActionLogConfig())  # type: ignore[arg-type]
    return RequestDesk(store.requests, store.journals, store.actions, contexts, "me"), store, zk


def test_a_malformed_request_znode_does_not_stop_the_app_s_decisions() -> None:
    run = loop(NO_CHANGE)
    desk, store, zk = _desk()
    run.autoscaler.requests = desk
    bad = str(zk.create(f"{ROOT}/apps/{APP}/requests/req-", b'{"to": 1, "by": [], "requested_at": 1, '
                        b'"expires_at": "nan"}', sequence=True, makepath=True)).rsplit("/", 1)[1]
    with capture_logs() as logs:
        assert run.autoscaler.cycle(APP) == "ok" and run.autoscaler.cycle(APP) == "ok"
    assert [d.mode for d in run.decisions.records] == ["no_change", "no_change"]
    assert len(_bad_lines(logs)) == 1
    assert store.requests.wait_result(APP, bad, 0.0) == ManualResult(False, "not a valid request")


def test_a_request_that_fails_while_carried_out_is_refused_and_removed_and_the_next_served() -> None:
    def contexts(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("boom\nforged: line")

    _unused, store, _zk = _desk(contexts)
    now = manual.time.time()
    first = store.requests.submit(APP, ManualRequest(None, "op", now, now + 60, type=manual.RequestType.MIGRATE,
                                                     query="q"))
    run = loop(NO_CHANGE)
    with capture_logs() as logs:
        served = manual.serve_requests(store.requests, store.journals, APP, store.actions,
                                       contexts, "me", False, run.collector.snapshots[0])
    assert served == [] and store.requests.pending(APP) == []
    answer = store.requests.wait_result(APP, first, 0.0)
    assert answer is not None and not answer.ok and "boom\\nforged: line" in answer.detail
    [failed] = [e for e in logs if e["event"] == "manual.request_failed"]
    assert failed["app"] == APP and "\n" not in failed["error"]


def test_a_service_failure_while_serving_a_request_ends_the_cycle_and_keeps_the_request() -> None:
    _unused, store, _zk = _desk()
    now = manual.time.time()
    store.requests.submit(APP, ManualRequest(None, "op", now, now + 60, type=manual.RequestType.MIGRATE, query="q"))

    def down(**_kw: object) -> None:
        raise redis.ConnectionError("Redis is down")

    run = loop(NO_CHANGE)
    with pytest.raises(redis.ConnectionError):
        manual.serve_requests(store.requests, store.journals, APP, store.actions, down, "me", False,
                              run.collector.snapshots[0])
    assert len(store.requests.pending(APP)) == 1


# -- 5. the agent epoch ----------------------------------------------------------------------------------


@pytest.mark.parametrize("garbage", [b"garbage", b"-4", b"9" * 5001, b"\xff", b"1e9", b"12 13"])
def test_a_garbage_agent_epoch_is_read_as_none_and_the_next_verified_epoch_replaces_it(garbage: bytes) -> None:
    zk = FakeZk()
    zk.create(agent_epoch_path(ROOT, APP), garbage, makepath=True)
    gate = CommandGate(zk, ROOT, APP)
    with capture_logs() as logs:
        assert gate.load() == 0 and gate.load() == 0
    assert [(e["key"], e["record"]) for e in _bad_lines(logs)] == [(agent_epoch_path(ROOT, APP), "agent_epoch")]
    gate._store(5)
    assert zk.nodes[agent_epoch_path(ROOT, APP)].data == b"5" and CommandGate(zk, ROOT, APP).load() == 5


@given(st.binary(max_size=40))
@PROPERTY
def test_parsing_an_agent_epoch_never_raises(data: bytes) -> None:
    epoch = parse_epoch(data)
    assert epoch is None or 0 <= epoch < 10**19


# -- 6. per-app isolation and the reload ----------------------------------------------------------------


class _FailingSummary(RecordingSink):
    def emit(self, event: Event) -> None:
        if isinstance(event, CycleEnded):
            raise RuntimeError("the status feed\nfailed")
        super().emit(event)


def test_nothing_a_cycle_raises_escapes_it_and_the_failure_is_logged_and_counted() -> None:
    run = loop(NO_CHANGE, sink=_FailingSummary())
    failed: list[str] = []
    run.autoscaler.on_failed = failed.append
    with capture_logs() as logs:
        assert run.autoscaler.cycle(APP) == "error"
        run.autoscaler.states["gone"] = AppState()  # an app no longer in the config
        assert run.autoscaler.cycle("gone") == "error"
    lines = [e for e in logs if e["event"] == "cycle.failed"]
    assert [e["app"] for e in lines] == [APP, "gone"] and failed == [APP, "gone"]
    assert "\\n" in lines[0]["error"] and "\n" not in lines[0]["error"]


def test_a_reload_that_fails_for_any_reason_keeps_the_running_config(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config("kept")
    daemon = service.Daemon(cfg, config_path="/nowhere.yaml", zk=FakeZk(), redis_client=fake_redis())  # type: ignore[arg-type]

    def unreadable(*_args: object) -> Config:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(service, "load_config", unreadable)
    with capture_logs() as logs:
        daemon.reload()
    assert daemon.cfg is cfg
    [refused] = [e for e in logs if e["event"] == "config.reload_refused"]
    assert "Permission denied" in refused["error"] and refused["keeping"] == "the running config"

    new = Config.model_validate({"apps": [{"name": "kept", "pipeline": "wordcount"},
                                          {"name": "added", "pipeline": "wordcount"}]})
    monkeypatch.setattr(service, "load_config", lambda *_args: new)

    def broken(_app: object) -> None:
        raise RuntimeError("scheduler refused")

    monkeypatch.setattr(daemon, "_add_app", broken)
    with capture_logs() as logs:
        daemon.reload()
    assert daemon.cfg is cfg and daemon.autoscaler.cfg is cfg
    assert any("scheduler refused" in e["error"] for e in logs if e["event"] == "config.reload_refused")
