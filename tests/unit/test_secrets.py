"""Redis and ZooKeeper secrets: read from private files or the environment, refused with the file, the
key and the fix when others can read them, and never shown in a repr, a config dump or an error;
the one Redis connection path passes them on (no server here: redis.Redis is captured)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from sparkscale import redisconn
from sparkscale.cli import main
from sparkscale.config import Config, ConfigError, RedisConfig, ZooKeeperConfig, load_config
from sparkscale.config.secrets import (
    REDIS_PASSWORD_ENV,
    ZOOKEEPER_AUTH_ENV,
    SecretFileProblem,
    check_secrets,
    read_secret_file,
    redis_password,
    zookeeper_auth,
)
from sparkscale.localenv.environment import EnvironmentStartError, LocalEnvironment
from sparkscale.localenv.private_files import write_private as _write_private
from sparkscale.localenv.redis_auth import quoted, redis_auth_lines
from sparkscale.protocol.sinks import SinkTarget
from sparkscale.redisconn import RedisAuth

PASSWORD = "s3cr3t-Pa55"
ZK_AUTH = "sparky:zk-Pa55:with-colon"


@pytest.fixture(autouse=True)
def no_secret_env(monkeypatch):
    monkeypatch.delenv(REDIS_PASSWORD_ENV, raising=False)
    monkeypatch.delenv(ZOOKEEPER_AUTH_ENV, raising=False)


def secret(tmp_path: Path, text: str, mode: int = 0o600, name: str = "secret") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    path.chmod(mode)
    return path


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


# -- reading a secret file -------------------------------------------------------------------------


def test_a_private_file_is_read_with_one_trailing_newline_stripped(tmp_path):
    assert read_secret_file(secret(tmp_path, PASSWORD + "\n")) == PASSWORD
    assert read_secret_file(secret(tmp_path, PASSWORD + "\r\n")) == PASSWORD
    assert read_secret_file(secret(tmp_path, PASSWORD + " \n\n")) == PASSWORD + " \n"
    assert read_secret_file(secret(tmp_path, PASSWORD, mode=0o400)) == PASSWORD


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o644, 0o666])
def test_a_file_open_to_group_or_others_is_refused_with_the_fix(tmp_path, mode):
    path = secret(tmp_path, PASSWORD, mode)
    with pytest.raises(SecretFileProblem) as err:
        read_secret_file(path)
    message = str(err.value)
    assert str(path) in message and f"chmod 600 {path}" in message and f"{mode:04o}" in message
    assert PASSWORD not in message


def test_missing_directory_empty_and_binary_files_are_refused(tmp_path):
    with pytest.raises(SecretFileProblem, match="does not exist"):
        read_secret_file(tmp_path / "nope")
    with pytest.raises(SecretFileProblem, match="not a regular file"):
        read_secret_file(tmp_path)
    with pytest.raises(SecretFileProblem, match="is empty"):
        read_secret_file(secret(tmp_path, "\n"))
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe" + PASSWORD.encode())
    binary.chmod(0o600)
    with pytest.raises(SecretFileProblem, match="not UTF-8") as err:
        read_secret_file(binary)
    assert err.value.__context__ is None  # the decode error (holding the bytes) is not chained


# -- through the config -----------------------------------------------------------------------------


def test_the_config_loader_names_file_key_and_fix(tmp_path):
    pw = secret(tmp_path, PASSWORD, 0o644)
    cfg_path = config_file(tmp_path, f"redis:\n  password_file: {pw}\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg_path)
    [problem] = err.value.problems
    assert (problem.source, problem.key) == (str(cfg_path), "redis.password_file")
    assert f"chmod 600 {pw}" in problem.message
    assert PASSWORD not in str(err.value)
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"zookeeper.auth_file={tmp_path / 'absent'}"])
    assert [(p.source, p.key) for p in err.value.problems] == [("--set", "zookeeper.auth_file")]


def test_check_config_exits_2_for_a_world_readable_password_file(tmp_path):
    pw = secret(tmp_path, PASSWORD, 0o644)
    cfg_path = config_file(tmp_path, f"redis:\n  password_file: {pw}\n")
    result = CliRunner().invoke(main, ["check-config", str(cfg_path)])
    assert result.exit_code == 2
    assert f"{cfg_path}: redis.password_file" in result.output and f"chmod 600 {pw}" in result.output
    assert PASSWORD not in result.output
    pw.chmod(0o600)
    assert CliRunner().invoke(main, ["check-config", str(cfg_path)]).exit_code == 0


def test_a_zookeeper_auth_file_must_hold_user_colon_password(tmp_path):
    for bad, marker in (("nocolonXYZ", "XYZ"), (":pwXYZ", "XYZ"), ("userXYZ:", "XYZ"), ("u:pwXYZ\nmore", "XYZ")):
        path = secret(tmp_path, bad, name="zkauth")
        result = CliRunner().invoke(main, ["status", "--set", f"zookeeper.auth_file={path}"])
        assert result.exit_code == 2, (bad, result.output)
        assert "zookeeper.auth_file" in result.output and "USER:PASSWORD" in result.output
        assert marker not in result.output
    good = secret(tmp_path, ZK_AUTH + "\n")
    assert zookeeper_auth(ZooKeeperConfig(auth_file=str(good))) == ("sparky", "zk-Pa55:with-colon")


def test_the_environment_stands_in_for_a_file(tmp_path, monkeypatch):
    assert redis_password(RedisConfig()) is None and zookeeper_auth(ZooKeeperConfig()) is None
    monkeypatch.setenv(REDIS_PASSWORD_ENV, "from-env")
    monkeypatch.setenv(ZOOKEEPER_AUTH_ENV, "envuser:envpass")
    assert redis_password(RedisConfig()) == "from-env"
    assert zookeeper_auth(ZooKeeperConfig()) == ("envuser", "envpass")
    # A file named in the config wins over the environment.
    assert redis_password(RedisConfig(password_file=str(secret(tmp_path, PASSWORD)))) == PASSWORD


def test_a_malformed_environment_secret_is_a_config_error_without_its_value(monkeypatch):
    monkeypatch.setenv(ZOOKEEPER_AUTH_ENV, "justapassword")
    with pytest.raises(ConfigError) as err:
        check_secrets(Config())
    [problem] = err.value.problems
    assert (problem.source, problem.key) == ("environment", ZOOKEEPER_AUTH_ENV)
    assert "justapassword" not in str(err.value)
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 2 and ZOOKEEPER_AUTH_ENV in result.output


def test_a_redis_username_needs_a_password(tmp_path, monkeypatch):
    cfg_path = config_file(tmp_path, "redis:\n  username: sparkscale\n")
    result = CliRunner().invoke(main, ["check-config", str(cfg_path)])
    assert result.exit_code == 2 and f"{cfg_path}: redis.username" in result.output
    monkeypatch.setenv(REDIS_PASSWORD_ENV, PASSWORD)
    assert CliRunner().invoke(main, ["check-config", str(cfg_path)]).exit_code == 0


def test_ca_file_needs_tls_and_must_exist(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    with pytest.raises(ConfigError, match=r"redis.tls: true"):
        load_config(None, [f"redis.ca_file={ca}"])
    with pytest.raises(ConfigError, match=r"redis.ca_file"):
        load_config(None, ["redis.tls=true", f"redis.ca_file={tmp_path / 'absent.pem'}"])
    assert load_config(None, ["redis.tls=true", f"redis.ca_file={ca}"]).redis.ca_file == str(ca)


def test_no_secret_in_the_config_repr_or_its_json_dump(tmp_path):
    pw, zk = secret(tmp_path, PASSWORD, name="pw"), secret(tmp_path, ZK_AUTH, name="zk")
    overrides = [f"redis.password_file={pw}", "redis.username=sparkscale", f"zookeeper.auth_file={zk}"]
    cfg = load_config(None, overrides)
    dumped = json.dumps(cfg.model_dump(mode="json"))
    shown = CliRunner().invoke(main, ["check-config", str(config_file(tmp_path, "")), "--show",
                                      *[a for o in overrides for a in ("--set", o)]])
    assert shown.exit_code == 0, shown.output
    for text in (repr(cfg), str(cfg), dumped, shown.output):
        assert PASSWORD not in text and "zk-Pa55" not in text
    assert str(pw) in dumped  # the path is shown, the secret is not
    auth = RedisAuth.from_config(cfg.redis)
    assert auth.password == PASSWORD and PASSWORD not in repr(auth)
    assert PASSWORD not in repr(SinkTarget(app="a", query="q", auth=auth))


# -- the Redis connection path ----------------------------------------------------------------------


@pytest.fixture
def captured(monkeypatch) -> list[dict]:
    calls: list[dict] = []
    monkeypatch.setattr(redisconn.redis, "Redis", lambda **kwargs: calls.append(kwargs) or kwargs)
    return calls


def test_connect_without_auth_passes_exactly_what_it_did(captured):
    redisconn.connect(RedisConfig())
    # Bytes that are not UTF-8 read as replaced text, for the reader to refuse by name (test_security_seam).
    assert captured == [{"host": "127.0.0.1", "port": 6380, "db": 0, "decode_responses": True,
                         "encoding_errors": "replace", "socket_timeout": 5.0, "socket_connect_timeout": 5.0}]


def test_connect_passes_username_password_and_tls(tmp_path, captured):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    cfg = RedisConfig(username="sparkscale", password_file=str(secret(tmp_path, PASSWORD)), tls=True, ca_file=str(ca))
    redisconn.connect(cfg)
    [kwargs] = captured
    assert kwargs["username"] == "sparkscale" and kwargs["password"] == PASSWORD
    assert kwargs["ssl"] is True and kwargs["ssl_ca_certs"] == str(ca)
    redisconn.connect(RedisConfig(password_file=str(secret(tmp_path, PASSWORD))))
    assert "username" not in captured[1] and "ssl" not in captured[1] and captured[1]["password"] == PASSWORD


def test_sink_options_carry_the_auth_to_executors_and_nothing_without_it(tmp_path, captured):
    plain = SinkTarget(app="a", query="q", port=7000)
    assert set(plain.as_options()) == {"host", "port", "db", "prefix", "app", "query"}
    assert SinkTarget.parse(plain.as_options()) == plain
    auth = RedisAuth.from_config(RedisConfig(username="u", password_file=str(secret(tmp_path, PASSWORD))))
    target = SinkTarget(app="a", query="q", port=7000, auth=auth)
    options = target.as_options()
    assert options["password"] == PASSWORD and options["username"] == "u"  # `password`: redacted by Spark
    # Spark hands options over lower-cased.
    assert SinkTarget.parse({k.lower(): v for k, v in options.items()}) == target
    target.client()
    assert captured[-1]["password"] == PASSWORD and captured[-1]["username"] == "u"
    with pytest.raises(ValueError, match="tls"):
        SinkTarget.parse({**plain.as_options(), "tls": "yes"})


def test_source_options_carry_the_auth_and_nothing_without_it():
    redis_source = pytest.importorskip("sparkscale_lab.pipelines.redis_source_options")
    plain = redis_source.RedisStreamsOptions(app="a", query="q", partitions=2)
    assert "password" not in plain.as_options() and "tls" not in plain.as_options()
    authed = redis_source.RedisStreamsOptions(app="a", query="q", partitions=2,
                                              auth=RedisAuth("u", PASSWORD, True, "/ca.pem"))
    options = {k.lower(): v for k, v in authed.as_options().items()}
    assert redis_source.RedisStreamsOptions.parse(options) == authed
    assert PASSWORD not in repr(authed)


# -- the embedded Redis -----------------------------------------------------------------------------


def test_embedded_redis_conf_requires_the_password_only_when_one_is_set(tmp_path):
    assert redis_auth_lines(RedisConfig()) == []
    pw = str(secret(tmp_path, 'pa"ss\\word é'))
    assert redis_auth_lines(RedisConfig(password_file=pw)) == ['requirepass "pa\\"ss\\\\word \\xc3\\xa9"']
    assert redis_auth_lines(RedisConfig(password_file=pw, username="ops")) == [
        "user default off", 'user "ops" on ">pa\\"ss\\\\word \\xc3\\xa9" ~* &* +@all']
    assert quoted("plain") == '"plain"'
    plain_conf = LocalEnvironment(load_config(None, [f"cluster.run_dir={tmp_path}"]))._redis_conf()
    assert "requirepass" not in plain_conf and "user " not in plain_conf


def test_service_files_are_written_private(tmp_path):
    path = tmp_path / "redis.conf"
    path.write_text("old")
    path.chmod(0o644)
    _write_private(path, "requirepass x\n")
    assert path.read_text() == "requirepass x\n" and os.stat(path).st_mode & 0o777 == 0o600


def test_cluster_up_refuses_tls_for_the_embedded_redis(tmp_path):
    cfg = load_config(None, [f"cluster.run_dir={tmp_path}", "redis.tls=true"])
    with pytest.raises(EnvironmentStartError, match="does not serve TLS"):
        LocalEnvironment(cfg).up()
    assert not (tmp_path / "state.json").exists()  # nothing was started
