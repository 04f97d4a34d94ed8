"""The embedded Redis's authentication, as redis.conf lines (written to a 0600 file, never put on the
command line, where `ps` would show it), from the same settings every client uses."""

from __future__ import annotations

from sparkscale.config import RedisConfig
from sparkscale.config.secrets import redis_password


def redis_auth_lines(cfg: RedisConfig) -> list[str]:
    """`requirepass` for a password alone; with `redis.username`, that user with every key, channel
    and command, and the `default` user off (so AUTH without the user name is refused). None: []."""
    password = redis_password(cfg)
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
