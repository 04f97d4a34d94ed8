#!/usr/bin/env bash
# Installs what sparkscale needs on a Debian machine (with Java 17): Debian packages for the
# embedded environment, then a virtual environment with the package and its test extras.
# Idempotent and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing Debian packages: ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

python3 - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"setup: Python 3.11+ is required, python3 is {sys.version.split()[0]}")
PY

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  python3 -m venv .venv
fi
stamp=.venv/.sparkscale-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing sparkscale and its pinned dependencies into .venv" >&2
  .venv/bin/pip install --quiet --disable-pip-version-check -e '.[test,lab]' >&2
  touch "$stamp"
fi
