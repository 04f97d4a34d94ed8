"""`sparkscale run` as a child process logging JSON lines to its own file: how the benchmarks, the
demo and the integration tests run a daemon, as an operator would (a separate process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class DaemonProcess:
    def __init__(self, config_path: str | None, overrides: Sequence[str], log_path: Path, name: str,
                 extra: Sequence[str] = (), max_cycles: int | None = None, env: dict[str, str] | None = None,
                 inherit_stderr: bool = False):
        """`extra` settings come after `overrides` (they win); the daemon's stderr goes to
        `<log_path>.stderr`, or to this process's stderr with `inherit_stderr` (the demo)."""
        self.name = name
        self.log_path = Path(log_path)
        self.log_path.unlink(missing_ok=True)
        self.stderr_path = self.log_path.with_suffix(".stderr")
        sets = [*overrides, f"daemon.id={name}", f"logging.file={self.log_path}", "logging.stderr=false", *extra]
        # A fault asked for in `env` needs its hooks installed in the child (migration_faults.py).
        faulty = any(key.startswith("SPARKSCALE_MIGRATION_") for key in (env or {}))
        module = "sparkscale_lab.bench.migration_faults" if faulty else "sparkscale"
        argv = [sys.executable, "-m", module, "run", *(["--config", str(config_path)] if config_path else [])]
        for s in sets:
            argv += ["--set", s]
        if max_cycles is not None:
            argv += ["--max-cycles", str(max_cycles)]
        stderr = None if inherit_stderr else open(self.stderr_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, **(env or {})})
        if stderr is not None:
            stderr.close()  # the child has its own descriptor

    def stderr_tail(self, chars: int = 6000) -> str:
        """The end of the daemon's stderr: where a slow stop writes every thread's stack."""
        return self.stderr_path.read_text(errors="replace")[-chars:] if self.stderr_path.exists() else ""

    def events(self, event: str | None = None, **match: Any) -> list[dict]:
        """Logged events (of one name, with fields equal to `match`), oldest first."""
        if not self.log_path.exists():
            return []
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written
            if (event is None or record.get("event") == event) and all(record.get(k) == v for k, v in match.items()):
                out.append(record)
        return out

    def stop(self, timeout_s: float = 60.0) -> None:
        """SIGTERM (the daemon finishes its cycle and releases its locks); SIGKILL after `timeout_s`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
