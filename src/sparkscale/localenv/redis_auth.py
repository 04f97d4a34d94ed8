"""The embedded Redis's authentication, as redis.conf lines (written to a 0600 file, never put on the
command line, where `ps` would show it), from the same settings every client uses; with
`security.identity_dir`, one ACL user per identity (redis_acl.py)."""

from __future__ import annotations

from pathlib import Path

from sparkscale.config import RedisConfig
from sparkscale.config.identities import Identity, read_credentials
from sparkscale.config.secrets import redis_password
from sparkscale.redis_acl import user_args


def redis_auth_lines(cfg: RedisConfig, identities: list[Identity] | None = None,
                     identity_dir: str | Path | None = None) -> list[str]:
    """`requirepass` for a password alone; with `redis.username`, that user with every key, channel
    and command, and the `default` user off (so AUTH without the user name is refused). None: [].
    With `identities` (their secrets in `identity_dir`): the `default` user off, a user for each,
    and the `redis.username` one if configured (a password alone is dropped: it is the default's)."""
    password = redis_password(cfg)
    if identities is not None and identity_dir is not None:
        lines = ["user default off"]
        if password is not None and cfg.username is not None:
            lines.append(f"user {quoted(cfg.username)} on {quoted('>' + password)} ~* &* +@all")
        for identity in identities:
            creds = read_credentials(identity, identity.secret_path(identity_dir))
            args = [creds.user, *user_args(creds, cfg.key_prefix)]
            lines.append(" ".join(["user", *(quoted(arg) for arg in args)]))
        return lines
    if password is None:
        return []
    if cfg.username is None:
        return [f"requirepass {quoted(password)}"]
    return ["user default off", f"user {quoted(cfg.username)} on {quoted('>' + password)} ~* &* +@all"]


def quoted(text: str) -> str:
    """`text` as one double-quoted redis.conf argument (sdssplitargs: \\\\, \\" and \\xHH escapes)."""
    out = []
    for ch in text:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch.isprintable() and ord(ch) < 0x7F:
            out.append(ch)
        else:
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8"))
    return '"' + "".join(out) + '"'
