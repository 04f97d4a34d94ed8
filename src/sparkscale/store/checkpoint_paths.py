"""Which checkpoint paths read from the store are used (issue 32). The agent publishes each query's
checkpoint root in Redis (protocol/queries.py `QueryInfo.checkpoint`); the agent reads it back to
discard and repartition a stopped query's state (agent/queries.py `checkpoint_of`), and any Redis
client can write it. So a path is used only if it is absolute or a URI of a file system Spark
checkpoints to, holds no control characters or `..` segment, is not too long, and lies inside the
checkpoint root when one is given.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse

# The file systems Spark Structured Streaming checkpoints to (Hadoop's FileSystem schemes).
ALLOWED_SCHEMES = ("file", "hdfs", "viewfs", "s3a", "gs", "abfs", "abfss", "wasb", "wasbs", "dbfs")
MAX_PATH_CHARS = 4096  # Linux's PATH_MAX
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def checkpoint_refusal(path: object, root: str | None = None) -> str | None:
    """Why the checkpoint `path` must not be used, or None. `root`: the checkpoint root it must lie
    in (an absolute path or URI, compared after normalising both); None: anywhere."""
    if not isinstance(path, str) or not path:
        return "not a non-empty string"
    if len(path) > MAX_PATH_CHARS:
        return f"longer than {MAX_PATH_CHARS} characters"
    if any(not ch.isprintable() for ch in path):
        return "holds a control character"
    where = _location(path)
    if isinstance(where, str):
        return where
    scheme, local = where
    if ".." in local.split("/"):
        return "has a '..' segment"
    if root is not None:
        inside = _location(root)
        if isinstance(inside, str):
            return f"the checkpoint root {root!r} {inside}"
        root_scheme, root_path = inside
        base = posixpath.normpath(root_path)
        if scheme != root_scheme or not (posixpath.normpath(local) + "/").startswith(base.rstrip("/") + "/"):
            return f"is not inside the checkpoint root {root}"
    return None


def _location(path: str) -> tuple[str, str] | str:
    """(scheme, path on it) of an absolute path ("file") or a URI; a string saying why it is neither."""
    match = _SCHEME.match(path)
    if match is None:
        return ("file", path) if path.startswith("/") else "is neither an absolute path nor a URI"
    scheme = match[1].lower()
    if scheme not in ALLOWED_SCHEMES:
        return f"scheme {scheme!r} is not one of {', '.join(ALLOWED_SCHEMES)}"
    try:
        parts = urllib.parse.urlsplit(path)
    except ValueError as exc:
        return f"is not a URI ({exc})"
    if parts.query or parts.fragment or "@" in parts.netloc:
        return "has a query, fragment or user"
    if not parts.path.startswith("/"):
        return "names no absolute path"
    return scheme + ("://" + parts.netloc.lower() if parts.netloc else ""), parts.path
