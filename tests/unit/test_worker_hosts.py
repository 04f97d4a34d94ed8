"""`cluster.worker_hosts`: validated in the config, and each worker of the embedded environment bound
to and advertising its own address (the specs only: nothing is started here)."""

from __future__ import annotations

import pytest

from sparkscale.config import Config, ConfigError, load_config
from sparkscale.localenv import probes
from sparkscale.localenv.environment import LocalEnvironment
from sparkscale.localenv.preflight import PreflightError, check_addresses

HOSTS = "cluster.worker_hosts=[127.0.0.2,127.0.0.3]"


def workers(cfg: Config):
    return [s for s in LocalEnvironment(cfg).specs(None) if s.name.startswith("spark-worker")]


def arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_default_is_every_worker_on_127_0_0_1():
    cfg = Config()
    assert cfg.cluster.worker_hosts == [] and cfg.cluster.worker_host(2) == "127.0.0.1"
    for spec in workers(cfg):
        assert arg(spec.argv, "--host") == "127.0.0.1" == spec.env["SPARK_LOCAL_IP"] == spec.host


def test_each_worker_binds_and_advertises_its_address(tmp_path):
    cfg = load_config(None, [HOSTS, f"cluster.run_dir={tmp_path}", "cluster.worker_web_port=30000"])
    specs = workers(cfg)
    assert [(s.name, arg(s.argv, "--host"), s.env["SPARK_LOCAL_IP"], s.host, s.ports) for s in specs] == [
        ("spark-worker-1", "127.0.0.2", "127.0.0.2", "127.0.0.2", [30000]),
        ("spark-worker-2", "127.0.0.3", "127.0.0.3", "127.0.0.3", [30001]),
    ]
    # The master, Redis and ZooKeeper stay on 127.0.0.1.
    others = [s for s in LocalEnvironment(cfg).specs(None) if not s.name.startswith("spark-worker")]
    assert {s.host for s in others} == {"127.0.0.1"}
    master = next(s for s in others if s.name == "spark-master")
    assert arg(master.argv, "--host") == "127.0.0.1" and master.env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert [s.host for s in LocalEnvironment(cfg).status() if s.name.startswith("spark-worker")] == [
        "127.0.0.2", "127.0.0.3"]


def test_a_worker_answers_only_when_the_master_lists_it_on_its_address(monkeypatch):
    listed = {"workers": [{"host": "127.0.0.2", "port": 40000, "webuiaddress": "http://127.0.0.2:30000",
                           "state": "ALIVE"}]}
    monkeypatch.setattr(probes, "master_json", lambda url: listed)
    assert probes.worker_alive("http://m", "127.0.0.2", 30000)
    assert not probes.worker_alive("http://m", "127.0.0.1", 30000)  # same port, another address
    assert not probes.worker_alive("http://m", "127.0.0.2", 30001)


@pytest.mark.parametrize(("override", "fragment"), [
    ("cluster.worker_hosts=[127.0.0.2]", "lists 1 address(es) but workers is 2"),
    ("cluster.worker_hosts=[127.0.0.2,localhost]", "worker_hosts[1] = 'localhost' is not an IPv4 address"),
    ("cluster.worker_hosts=[127.0.0.2,'::1']", "is not an IPv4 address"),
    ("cluster.worker_hosts=[127.0.0.2,127.0.0.300]", "is not an IPv4 address"),
])
def test_worker_hosts_must_be_one_ipv4_literal_per_worker(override, fragment):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert fragment in str(err.value)


def test_three_workers_three_hosts():
    cfg = load_config(None, ["cluster.workers=3", "cluster.worker_hosts=[127.0.0.2,127.0.0.3,127.0.0.2]"])
    assert [cfg.cluster.worker_host(i) for i in (1, 2, 3)] == ["127.0.0.2", "127.0.0.3", "127.0.0.2"]


def test_an_address_the_machine_lacks_is_named_before_anything_starts():
    check_addresses(["127.0.0.1", "127.0.0.2"])  # Linux: all of 127.0.0.0/8 is loopback
    with pytest.raises(PreflightError, match=r"cannot bind 192\.0\.2\.1"):
        check_addresses(["192.0.2.1"])  # TEST-NET-1: on no interface
