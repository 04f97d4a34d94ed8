"""A managed driver's Spark configuration as spark-submit gets it: a properties file readable by the
driver's user only, never `--conf` arguments, which anyone on the host can read with `ps` (issue 32).

Which keys are secret is Spark's own rule (the default of `spark.redaction.regex`, which Spark's UI
and logs apply), so that what sparkscale masks (`check-config --show`) is what Spark masks.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sparkscale.config.secrets import SPARK_SECRET_KEY as SECRET_KEY
from sparkscale.localenv.private_files import write_private

# What Spark's UI shows in place of a redacted value (Utils.REDACTION_REPLACEMENT_TEXT).
REDACTED = "*********(redacted)"


def is_secret(key: str) -> bool:
    return SECRET_KEY.search(key) is not None


def masked(conf: Mapping[str, str]) -> dict[str, str]:
    """`conf` with every secret value replaced by Spark's redaction text."""
    return {key: REDACTED if is_secret(key) else value for key, value in conf.items()}


def _escaped(text: str, is_key: bool) -> str:
    """`text` in java.util.Properties syntax: backslash escapes for what Properties.load would read
    otherwise (separators and comment marks in a key, leading blanks, line ends), \\uXXXX for
    anything not printable ASCII."""
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif ch == " " and (is_key or i == 0):
            out.append("\\ ")
        elif ch in "=:#!" and (is_key or i == 0):
            out.append("\\" + ch)
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.extend(f"\\u{unit:04x}" for unit in _utf16_units(ch))
    return "".join(out)


def _utf16_units(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def properties_text(conf: Mapping[str, str]) -> str:
    """`conf` as a java.util.Properties file, one `key=value` line each, in the given order."""
    lines = ["# Written by sparkscale for spark-submit --properties-file; rewritten at each launch."]
    lines += [f"{_escaped(key, True)}={_escaped(value, False)}" for key, value in conf.items()]
    return "\n".join(lines) + "\n"


def write_properties(path: Path, conf: Mapping[str, str]) -> Path:
    """Write `conf` to `path` with mode 0600 (it may hold secrets); return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, properties_text(conf))
    return path


def submit_arguments(path: Path) -> list[str]:
    """spark-submit's arguments for the properties file. --properties-file alone would replace
    conf/spark-defaults.conf; --load-spark-defaults (Spark 4) reads it too, below the file, which is
    where `--conf` settings stood before."""
    return ["--properties-file", str(path), "--load-spark-defaults"]
