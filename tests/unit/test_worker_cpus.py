"""`cluster.worker_cpus` and per-worker `cluster.worker_cores`: validated in the config, each pinned
worker launched under `taskset -c` with its own advertised cores (the specs only: nothing is started
here), and a clear preflight error when taskset is missing."""

from __future__ import annotations

import pytest

from sparkscale.config import Config, ConfigError, load_config
from sparkscale.config.sections import usable_cpus
from sparkscale.localenv import preflight
from sparkscale.localenv.environment import LocalEnvironment, pinned
from sparkscale.localenv.preflight import PreflightError, check_tools

CPUS = sorted(usable_cpus())


def workers(cfg: Config):
    return [s for s in LocalEnvironment(cfg).specs(None) if s.name.startswith("spark-worker")]


def arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_by_default_no_worker_is_pinned_and_all_advertise_the_one_core_count():
    cfg = Config()
    assert cfg.cluster.worker_cpus == [] and cfg.cluster.cpus_of(1) == []
    for spec in workers(cfg):
        assert spec.argv[0] != "taskset" and "taskset" not in spec.argv
        assert arg(spec.argv, "--cores") == str(cfg.cluster.worker_cores) == "8"


def test_each_pinned_worker_starts_under_taskset_with_its_own_cores(tmp_path):
    cpus = f"[[{CPUS[0]}],[{CPUS[-1]}]]"
    cfg = load_config(None, [f"cluster.run_dir={tmp_path}", f"cluster.worker_cpus={cpus}", "cluster.worker_cores=[6,3]",
                             "cluster.worker_hosts=[127.0.0.2,127.0.0.3]"])
    one, two = workers(cfg)
    assert one.argv[:3] == ["taskset", "-c", str(CPUS[0])] and two.argv[:3] == ["taskset", "-c", str(CPUS[-1])]
    assert one.argv[3].endswith("spark-class") or one.argv[3] == ""  # no tools given: spark-class unknown
    assert one.argv[4] == "org.apache.spark.deploy.worker.Worker"
    assert (arg(one.argv, "--cores"), arg(two.argv, "--cores")) == ("6", "3")
    assert (arg(one.argv, "--host"), arg(two.argv, "--host")) == ("127.0.0.2", "127.0.0.3")
    others = [s for s in LocalEnvironment(cfg).specs(None) if not s.name.startswith("spark-worker")]
    assert all("taskset" not in s.argv for s in others)  # only the workers (and so their executors)


def test_the_prefix_names_every_cpu_of_a_worker():
    assert pinned([0, 2, 3]) == ["taskset", "-c", "0,2,3"]
    assert pinned([1], "/usr/bin/taskset") == ["/usr/bin/taskset", "-c", "1"]
    assert pinned([]) == []


def test_one_core_count_or_one_per_worker():
    cfg = load_config(None, ["cluster.workers=3", "cluster.worker_cores=[6,3,2]"])
    assert [cfg.cluster.cores_of(i) for i in (1, 2, 3)] == [6, 3, 2]
    cfg = load_config(None, ["cluster.worker_cores=4"])
    assert [cfg.cluster.cores_of(i) for i in (1, 2)] == [4, 4]


@pytest.mark.parametrize(("override", "fragment"), [
    ("cluster.worker_cpus=[[0]]", "worker_cpus lists 1 CPU set(s) but workers is 2"),
    (f"cluster.worker_cpus=[[0],[{max(CPUS) + 1}]]", f"worker_cpus[1] names CPU {max(CPUS) + 1}, which this machine"),
    ("cluster.worker_cpus=[[0],[-1]]", "worker_cpus[1] names CPU -1"),
    ("cluster.worker_cpus=[[0],[]]", "worker_cpus[1] is empty"),
    ("cluster.worker_cores=[6]", "worker_cores lists 1 count(s) but workers is 2"),
    ("cluster.worker_cores=[6,0]", "worker_cores[1] = 0: expected 1 to 256 cores"),
    ("cluster.worker_cores=0", "worker_cores = 0: expected 1 to 256 cores"),
])
def test_a_bad_setting_names_its_key(override, fragment):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert fragment in str(err.value) and "cluster" in str(err.value)


def test_the_cpu_check_names_the_usable_cpus():
    with pytest.raises(ConfigError, match=r"usable CPUs .*os\.cpu_count\(\)"):
        load_config(None, [f"cluster.worker_cpus=[[0],[{max(CPUS) + 1}]]"])


def test_a_missing_taskset_is_a_preflight_error_only_when_workers_are_pinned(monkeypatch):
    # Every other tool found, so that only taskset is missing (and no JVM is started for its version).
    monkeypatch.setattr(preflight.shutil, "which", lambda name: None if name == "taskset" else f"/usr/bin/{name}")
    monkeypatch.setattr(preflight, "java_major_version", lambda path: 17)
    monkeypatch.setattr(preflight, "ZOOKEEPER_JAR", preflight.Path(__file__))  # whatever this machine has
    assert check_tools("java", pin_cpus=False).taskset is None
    with pytest.raises(PreflightError, match=r"taskset is missing .*cluster.worker_cpus.*util-linux"):
        check_tools("java", pin_cpus=True)


def test_a_found_taskset_is_what_the_workers_start_under(monkeypatch, tmp_path):
    monkeypatch.setattr(preflight.shutil, "which", lambda name: f"/opt/bin/{name}")
    monkeypatch.setattr(preflight, "java_major_version", lambda path: 17)
    monkeypatch.setattr(preflight, "ZOOKEEPER_JAR", preflight.Path(__file__))
    tools = check_tools("java", pin_cpus=True)
    assert tools.taskset == "/opt/bin/taskset"
    cfg = load_config(None, [f"cluster.run_dir={tmp_path}", f"cluster.worker_cpus=[[{CPUS[0]}],[{CPUS[-1]}]]"])
    specs = [s for s in LocalEnvironment(cfg).specs(tools) if s.name.startswith("spark-worker")]
    assert [s.argv[:2] for s in specs] == [["/opt/bin/taskset", "-c"]] * 2
    assert specs[0].argv[3] == str(tools.spark_class)
