"""What each identity (config/identities.py) may do in Redis, as ACL rules (issue 32, "One identity per role").

Every sparkscale key starts with `redis.key_prefix`, and every key of an app with `{prefix}{app}:`
(protocol/keys.py; the example pipelines' streams and outputs too). So:
- daemon: every sparkscale key, every command but administrative and dangerous ones (it uses plain
  reads and writes, streams, sorted sets, hashes, PING; no KEYS, INFO, CONFIG or SCAN);
- operator: every sparkscale key, every channel, every command (it creates the agents' users);
- agent-<app>: its app's keys only, no administrative or dangerous command: a driver cannot touch
  the action log, the blocklist, the downtime samples or another app's keys.
The `default` user is off whenever identities are on.
"""

from __future__ import annotations

import redis

from sparkscale.config.identities import Credentials, Identity, Role

_GLOB_SPECIALS = "\\*?[]^"


def glob_escaped(text: str) -> str:
    """`text` matched literally in a Redis key pattern."""
    return "".join("\\" + ch if ch in _GLOB_SPECIALS else ch for ch in text)


def redis_acl_rules(identity: Identity, prefix: str) -> list[str]:
    """The ACL rules (after the user name and password) of `identity` for keys under `prefix`."""
    keys = glob_escaped(prefix)
    if identity.role is Role.OPERATOR:
        return [f"~{keys}*", "&*", "+@all"]
    if identity.role is Role.DAEMON:
        return [f"~{keys}*", "resetchannels", "+@all", "-@admin", "-@dangerous"]
    assert identity.app is not None  # identity_for gives an agent its app
    return [f"~{keys}{glob_escaped(identity.app)}:*", "resetchannels", "+@all", "-@admin", "-@dangerous"]


def user_args(creds: Credentials, prefix: str) -> list[str]:
    """ACL SETUSER's arguments after the user name: the user reset, on, its password and its rules
    (so a user made before gets exactly these, nothing left from earlier)."""
    return ["reset", "on", f">{creds.password}", *redis_acl_rules(creds.identity, prefix)]


def set_user(client: redis.Redis, creds: Credentials, prefix: str) -> None:
    """Create or replace `creds`' Redis user (the caller is the operator, who may)."""
    # The rules as redis.conf has them (acl_setuser would rebuild them from keyword arguments).
    client.execute_command("ACL", "SETUSER", creds.user, *user_args(creds, prefix))  # type: ignore[no-untyped-call]
