"""Issue 32's safe defaults: drivers listen on loopback with kill disabled, Spark secrets reach
spark-submit through a private properties file (never argv), `check-config --show` masks them, the
embedded environment's services get an allow-listed environment, ZooKeeper TLS, and the driver
unit's hardening and polkit scoping."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from sparkscale.apps.run_files import spark_properties_path
from sparkscale.apps.spark_properties import (
    REDACTED,
    is_secret,
    masked,
    properties_text,
    submit_arguments,
    write_properties,
)
from sparkscale.apps.submit import driver_environment, spark_conf, submit_command
from sparkscale.apps.systemd_units import app_units, polkit_rule
from sparkscale.cli import main
from sparkscale.config import Config, ConfigError, load_config
from sparkscale.config.drivers import DriversConfig
from sparkscale.localenv.child_env import child_environment
from sparkscale.localenv.environment import EnvironmentStartError, LocalEnvironment
from sparkscale.localenv.preflight import Tools
from sparkscale.zkconn import _tls_kwargs, client

SECRET = "hunter2-Pa55"
SECRET_CONF = {
    "spark.authenticate.secret": SECRET,
    "spark.hadoop.fs.s3a.access.key": "AKIA-" + SECRET,
    "spark.hadoop.fs.s3a.secret.key": "s3-" + SECRET,
    "spark.ssl.keyStorePassword": "ks-" + SECRET,
    "spark.some.Token": "tok-" + SECRET,
    "spark.executor.cores": "2",
}
TOOLS = Tools(java="java", java_major=17, redis_server="redis-server", spark_home=Path("/opt/spark"))
REPO = Path(__file__).resolve().parents[2]


def app_config(tmp_path: Path, spark_conf_yaml: str = "") -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(f"cluster:\n  run_dir: {tmp_path / 'run'}\napps:\n  - name: wc\n    spark_conf:\n"
                    + (spark_conf_yaml or "      {}\n"))
    return path


def secret_config(tmp_path: Path) -> Config:
    lines = "".join(f"      {key}: {json.dumps(value)}\n" for key, value in SECRET_CONF.items())
    return load_config(app_config(tmp_path, lines))


# -- drivers listen on loopback, kill disabled -----------------------------------------------------


def test_drivers_bind_loopback_with_kill_disabled_by_default(tmp_path):
    cfg = load_config(app_config(tmp_path))
    conf = spark_conf(cfg, cfg.apps[0])
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.ui.killEnabled"] == "false"
    # Spark binds a driver's UI to SPARK_LOCAL_IP, else 0.0.0.0: the driver's environment sets it.
    assert driver_environment(cfg, TOOLS)["SPARK_LOCAL_IP"] == "127.0.0.1"
    # The shipped config is the defaults, loopback included; metrics listen on loopback too.
    shipped = load_config(REPO / "configs" / "sparkscale.yaml")
    assert shipped.spark.driver_bind_address == "127.0.0.1" and shipped.metrics.host == "127.0.0.1"


def test_the_user_may_still_open_drivers_up(tmp_path):
    path = app_config(tmp_path, "      spark.ui.killEnabled: 'true'\n")
    cfg = load_config(path, ["spark.driver_bind_address=0.0.0.0", "spark.driver_host=10.0.0.5"])
    conf = spark_conf(cfg, cfg.apps[0])
    assert conf["spark.ui.killEnabled"] == "true" and conf["spark.driver.bindAddress"] == "0.0.0.0"
    assert driver_environment(cfg, TOOLS)["SPARK_LOCAL_IP"] == "0.0.0.0"
    every = load_config(path, ["spark.driver_bind_address=null"])
    assert "spark.driver.bindAddress" not in spark_conf(every, every.apps[0])


def test_a_driver_host_others_reach_needs_a_bind_address_they_can_reach(tmp_path):
    with pytest.raises(ConfigError, match="driver_bind_address"):
        load_config(app_config(tmp_path), ["spark.driver_host=10.0.0.5"])
    assert load_config(app_config(tmp_path), ["spark.driver_host=localhost"]).spark.driver_host == "localhost"


def test_the_embedded_environment_listens_on_loopback_only(tmp_path):
    env = LocalEnvironment(load_config(app_config(tmp_path)))
    assert {spec.host for spec in env.specs(None)} == {"127.0.0.1"}
    assert "bind 127.0.0.1\n" in env._redis_conf()
    assert "clientPortAddress=127.0.0.1\n" in env._zoo_cfg()
    [master] = [spec for spec in env.specs(None) if spec.name == "spark-master"]
    assert master.files[tmp_path / "run" / "spark" / "conf" / "spark-defaults.conf"] == "spark.ui.killEnabled false\n"


# -- Spark properties: a private file, never argv ---------------------------------------------------


def test_secret_keys_follow_sparks_redaction_regex():
    secret = [key for key in SECRET_CONF if is_secret(key)]
    assert secret == [k for k in SECRET_CONF if k != "spark.executor.cores"]
    assert not is_secret("spark.ui.port") and is_secret("spark.my.ACCESSKEY") and is_secret("x.access.key")
    assert masked(SECRET_CONF) == {k: ("2" if k == "spark.executor.cores" else REDACTED) for k in SECRET_CONF}


def test_no_spark_conf_value_is_on_the_submit_command_line(tmp_path):
    cfg = secret_config(tmp_path)
    app = cfg.apps[0]
    conf = spark_conf(cfg, app)
    path = write_properties(spark_properties_path(cfg, app.name), conf)
    argv = submit_command(cfg, app, None, [], TOOLS, path)
    line = " ".join(argv)
    for value in SECRET_CONF.values():
        if value != "2":
            assert value not in line
    assert "--conf" not in argv and SECRET not in line
    # Only the file's path, and spark-defaults.conf still read below it (as under --conf before).
    start = argv.index("--properties-file")
    assert argv[start:start + 3] == submit_arguments(path) == ["--properties-file", str(path), "--load-spark-defaults"]
    assert path == tmp_path / "run" / "pipelines" / "wc.properties"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert parse_properties(path.read_text()) == conf


def test_an_existing_properties_file_is_made_private_again(tmp_path):
    path = tmp_path / "p" / "a.properties"
    path.parent.mkdir()
    path.write_text("old")
    path.chmod(0o644)
    write_properties(path, {"spark.authenticate.secret": SECRET})
    assert os.stat(path).st_mode & 0o777 == 0o600 and SECRET in path.read_text()


def parse_properties(text: str) -> dict[str, str]:
    """A reader of java.util.Properties' line syntax (one logical line per entry, as written)."""
    out = {}
    for line in text.splitlines():
        if not line or line[0] in "#!":
            continue
        key, i = _unescape(line, 0, True)
        value, _ = _unescape(line, i + 1, False)
        out[key] = value
    return out


def _unescape(line: str, i: int, is_key: bool) -> tuple[str, int]:
    chars = []
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            nxt = line[i + 1]
            if nxt == "u":
                chars.append(chr(int(line[i + 2:i + 6], 16)))
                i += 6
                continue
            chars.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
            continue
        if is_key and ch in "=:":
            return _utf16("".join(chars)), i
        chars.append(ch)
        i += 1
    return _utf16("".join(chars)), i


def _utf16(text: str) -> str:
    """Java strings are UTF-16: a surrogate pair read from two \\u escapes is one character."""
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be")


@pytest.mark.parametrize(("key", "value"), [
    ("spark.a", "plain"), ("spark.b", "with = and : and # and !"), ("spark.c", " leading blank"),
    ("spark.d", "line\nbreak\r\ttab\\back"), ("spark.e", "é ü ☃ 🚀"), ("spark.key=odd:key", "#first"),
    ("spark.f", "!bang"), ("spark.g", ""),
])
def test_properties_round_trip_through_javas_syntax(key, value):
    text = properties_text({key: value})
    assert text.startswith("#") and text.count("\n") == 2  # the comment and one line: no raw line break
    assert parse_properties(text) == {key: value}
    assert all(" " <= ch <= "~" for ch in text.replace("\n", ""))  # \uXXXX for anything else


# -- check-config --show masks them --------------------------------------------------------------------


def test_check_config_show_masks_secret_spark_conf_values(tmp_path):
    lines = "".join(f"      {key}: {json.dumps(value)}\n" for key, value in SECRET_CONF.items())
    shown = CliRunner().invoke(main, ["check-config", str(app_config(tmp_path, lines)), "--show"])
    assert shown.exit_code == 0, shown.output
    assert SECRET not in shown.output
    dump = json.loads(shown.output)
    assert dump["apps"][0]["spark_conf"] == masked(SECRET_CONF)
    assert dump["apps"][0]["spark_conf"]["spark.executor.cores"] == "2"


# -- the services' environment -------------------------------------------------------------------------


SECRETS_ENV = {"SPARKSCALE_REDIS_PASSWORD": SECRET, "SPARKSCALE_ZOOKEEPER_AUTH": "u:" + SECRET,
               "AWS_SECRET_ACCESS_KEY": SECRET, "SPARKSCALE_CONFIG": "/etc/x.yaml"}


def test_child_environment_is_an_allow_list():
    parent = {"PATH": "/usr/bin", "HOME": "/home/u", "LANG": "C.UTF-8", "LC_ALL": "C", "JAVA_HOME": "/jdk",
              "TMPDIR": "/t", "SPARK_MASTER_OPTS": "-Dx=1", "PYTHONPATH": "/src", **SECRETS_ENV}
    plain = child_environment({"OWN": "1"}, spark=False, parent=parent)
    assert plain == {"PATH": "/usr/bin", "HOME": "/home/u", "LANG": "C.UTF-8", "LC_ALL": "C",
                     "JAVA_HOME": "/jdk", "TMPDIR": "/t", "OWN": "1"}
    spark = child_environment({"SPARK_LOCAL_IP": "127.0.0.2"}, spark=True, parent=parent)
    assert spark["SPARK_MASTER_OPTS"] == "-Dx=1" and spark["PYTHONPATH"] == "/src"
    assert spark["SPARK_LOCAL_IP"] == "127.0.0.2"
    for env in (plain, spark):
        assert not set(SECRETS_ENV) & set(env)
        assert SECRET not in json.dumps(env)


class Started(Exception):
    """Raised by the fake Popen: the environment a service was started with is in `env`."""

    def __init__(self, env: dict[str, str]):
        super().__init__("started")
        self.env = env


def test_no_sparkscale_secret_reaches_a_service_or_a_workers_executors(tmp_path, monkeypatch):
    for name, value in SECRETS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SPARK_WORKER_OPTS", "-Dw=1")
    from sparkscale.localenv import environment

    def fake_popen(argv: list[str], **kwargs: Any) -> None:
        raise Started(kwargs["env"])

    monkeypatch.setattr(environment.subprocess, "Popen", fake_popen)
    monkeypatch.setattr(environment, "port_open", lambda host, port: False)
    env = LocalEnvironment(load_config(app_config(tmp_path)))
    seen = {}
    for spec in env.specs(TOOLS):
        with pytest.raises(Started) as started:
            env._ensure_started(spec)
        seen[spec.name] = started.value.env
    assert set(seen) == {"zookeeper", "redis", "spark-master", "spark-worker-1", "spark-worker-2"}
    for name, child in seen.items():
        assert not set(SECRETS_ENV) & set(child), name
        assert child["PATH"] == os.environ["PATH"], name
    # Workers (whose environment their executors inherit) keep the operator's Spark settings.
    assert seen["spark-worker-1"]["SPARK_WORKER_OPTS"] == "-Dw=1"
    assert "SPARK_WORKER_OPTS" not in seen["redis"] and "SPARK_WORKER_OPTS" not in seen["zookeeper"]


# -- ZooKeeper TLS ---------------------------------------------------------------------------------------


def pem(tmp_path: Path, name: str) -> str:
    path = tmp_path / name
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return str(path)


def test_zookeeper_tls_kwargs(tmp_path):
    assert _tls_kwargs(load_config(None).zookeeper) == {}
    ca, cert, key = pem(tmp_path, "ca.pem"), pem(tmp_path, "c.pem"), pem(tmp_path, "k.pem")
    on = load_config(None, ["zookeeper.tls=true"]).zookeeper
    assert _tls_kwargs(on) == {"use_ssl": True, "verify_certs": True, "check_hostname": True}
    full = load_config(None, ["zookeeper.tls=true", f"zookeeper.ca_file={ca}", f"zookeeper.cert_file={cert}",
                              f"zookeeper.key_file={key}"]).zookeeper
    kwargs = _tls_kwargs(full)
    assert kwargs == {"use_ssl": True, "verify_certs": True, "check_hostname": True, "ca": ca, "certfile": cert,
                      "keyfile": key}
    zk = client(full)  # not started: only its connection settings are looked at
    assert zk.use_ssl and zk.ca == ca and zk.certfile == cert and zk.keyfile == key and zk.verify_certs


def test_zookeeper_tls_files_are_validated(tmp_path):
    ca, cert, key = pem(tmp_path, "ca.pem"), pem(tmp_path, "c.pem"), pem(tmp_path, "k.pem")
    with pytest.raises(ConfigError, match=r"zookeeper.tls: true"):
        load_config(None, [f"zookeeper.ca_file={ca}"])
    with pytest.raises(ConfigError, match=r"zookeeper.tls: true"):
        load_config(None, [f"zookeeper.cert_file={cert}", f"zookeeper.key_file={key}"])
    with pytest.raises(ConfigError, match=r"cert_file and key_file go together"):
        load_config(None, ["zookeeper.tls=true", f"zookeeper.cert_file={cert}"])
    with pytest.raises(ConfigError, match=r"zookeeper.key_file"):
        load_config(None, ["zookeeper.tls=true", f"zookeeper.cert_file={cert}",
                           f"zookeeper.key_file={tmp_path / 'absent.pem'}"])


def test_cluster_up_refuses_tls_for_the_embedded_zookeeper(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARKSCALE_CONFIG", raising=False)
    cfg = load_config(None, [f"cluster.run_dir={tmp_path}", "zookeeper.tls=true"])
    with pytest.raises(EnvironmentStartError, match="embedded ZooKeeper does not serve TLS"):
        LocalEnvironment(cfg).up()
    assert not (tmp_path / "state.json").exists()
    done = CliRunner().invoke(main, ["cluster", "up", "--set", f"cluster.run_dir={tmp_path}",
                                     "--set", "zookeeper.tls=true"])
    assert done.exit_code == 3 and "zookeeper.tls" in done.output


# -- the driver unit and the polkit rule -------------------------------------------------------------


APP_UNIT = REPO / "systemd" / "sparkscale-app@.service"
HARDENING = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
    "PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes", "ProtectClock": "yes", "ProtectHostname": "yes",
    "CapabilityBoundingSet": "", "AmbientCapabilities": "",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK", "RestrictNamespaces": "yes",
    "RestrictRealtime": "yes", "RestrictSUIDSGID": "yes", "LockPersonality": "yes",
    "SystemCallArchitectures": "native", "SystemCallFilter": "@system-service", "SystemCallErrorNumber": "EPERM",
    # The JVM's JIT writes code and runs it.
    "MemoryDenyWriteExecute": "no",
    "StateDirectory": "sparkscale", "LogsDirectory": "sparkscale",
}


def service_settings(path: Path) -> dict[str, str]:
    section, out = "", {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif line and not line.startswith("#") and section == "Service":
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_the_driver_unit_is_hardened():
    settings = service_settings(APP_UNIT)
    assert {key: settings.get(key) for key in HARDENING} == HARDENING


def test_systemd_analyze_rates_the_driver_unit_like_the_daemons(tmp_path):
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing: apt-get install systemd"
    copy = tmp_path / "sparkscale-app@wordcount.service"
    copy.write_text(APP_UNIT.read_text())
    proc = subprocess.run([analyze, "security", "--offline=true", str(copy)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "LC_ALL": "C"}, check=False)
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", proc.stdout + proc.stderr)
    assert found, proc.stdout + proc.stderr
    assert float(found.group(1)) < 3.0  # 8.7 before the hardening; the daemon's unit rates 1.9


APPS = {"wordcount": "sparkscale-wordcount", "taxi": "sparkscale-taxi"}


def test_polkit_rule_names_each_app_unit_with_its_own_driver_user():
    rule = polkit_rule(app_units(DriversConfig(), APPS))
    assert '"sparkscale-app@wordcount.service": "sparkscale-wordcount"' in rule
    assert '"sparkscale-app@taxi.service": "sparkscale-taxi"' in rule
    assert 'subject.user == "sparkscale"' in rule and 'subject.user == owners[unit] && verb == "restart"' in rule
    assert "sparkscale-app@[" not in rule  # no pattern that matches units of apps it does not list
    with pytest.raises(ValueError, match="user name"):
        polkit_rule({"sparkscale-app@x.service": 'x" || true || "'})
    with pytest.raises(ValueError, match="unit name"):
        polkit_rule({'a"; polkit.Result.YES; "': "x"})


def polkit_decides(rule: str, user: str, unit: str, verb: str) -> str:
    """The rule's answer, evaluated by node with polkit's objects stubbed as polkit documents them."""
    node = shutil.which("node") or shutil.which("nodejs")
    assert node, "node is missing: apt-get install nodejs"
    script = f"""
var rules = [];
var polkit = {{Result: {{YES: "yes", NO: "no", NOT_HANDLED: "not_handled"}},
              addRule: function (f) {{ rules.push(f); }}}};
{rule}
var details = {{unit: {json.dumps(unit)}, verb: {json.dumps(verb)}}};
var action = {{id: "org.freedesktop.systemd1.manage-units", lookup: function (k) {{ return details[k]; }}}};
process.stdout.write(String(rules[0](action, {{user: {json.dumps(user)}}})));
"""
    return subprocess.run([node, "-e", script], capture_output=True, text=True, timeout=60, check=True).stdout


@pytest.mark.parametrize(("user", "unit", "verb", "expected"), [
    ("sparkscale", "sparkscale-app@wordcount.service", "start", "yes"),
    ("sparkscale", "sparkscale-app@taxi.service", "stop", "yes"),
    ("sparkscale", "sparkscale-app@other.service", "start", "not_handled"),  # not a managed app
    ("sparkscale", "sparkscale-app@taxi.service", "kill", "not_handled"),
    ("sparkscale-wordcount", "sparkscale-app@wordcount.service", "restart", "yes"),
    ("sparkscale-wordcount", "sparkscale-app@wordcount.service", "stop", "not_handled"),
    ("sparkscale-wordcount", "sparkscale-app@taxi.service", "restart", "not_handled"),  # another app's
    ("sparkscale-taxi", "sparkscale-app@wordcount.service", "restart", "not_handled"),
    ("mallory", "sparkscale-app@wordcount.service", "restart", "not_handled"),
    ("sparkscale-wordcount", "sshd.service", "restart", "not_handled"),
])
def test_polkit_rule_lets_a_driver_restart_only_its_own_unit(user, unit, verb, expected):
    assert polkit_decides(polkit_rule(app_units(DriversConfig(), APPS)), user, unit, verb) == expected


def test_a_driver_with_its_own_identity_gets_no_shared_secret_from_the_environment(monkeypatch, tmp_path):
    from sparkscale.config.identities import IDENTITY_FILE_ENV
    monkeypatch.setenv("SPARKSCALE_REDIS_PASSWORD", "shared")
    monkeypatch.setenv("SPARKSCALE_ZOOKEEPER_AUTH", "u:shared")
    cfg = load_config(None, [])
    env = driver_environment(cfg, TOOLS, tmp_path / "agent-a.secret")
    assert env[IDENTITY_FILE_ENV] == str(tmp_path / "agent-a.secret")
    assert "SPARKSCALE_REDIS_PASSWORD" not in env and "SPARKSCALE_ZOOKEEPER_AUTH" not in env
    # Without role identities the agent reads them from its environment, as before.
    assert driver_environment(cfg, TOOLS)["SPARKSCALE_REDIS_PASSWORD"] == "shared"
