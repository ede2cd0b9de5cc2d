#!/usr/bin/env bash
# Sets up everything the project needs on a fresh machine, idempotently:
#   - Java (for Spark): checks `java`, installs OpenJDK 17 with apt-get when it is missing and we are root;
#   - Chromium (for the pipeline pages' browser tests): installs Debian's chromium the same way;
#   - .venv with Airflow 3 and everything in requirements/airflow3.lock, plus this package (editable) with
#     its `test` extra (the `testing`, `spark` and `bigquery` extras and the test tools), held to the lock;
#   - with --airflow2: .venv-airflow2 the same way with Airflow 2.11 (requirements/airflow2.lock).
# Usage: scripts/setup.sh [--airflow2]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

log() { printf '[setup] %s\n' "$*" >&2; }

pick_python() {
  for candidate in python3.11 python3.12 python3.10 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] < (3, 13) else 1)'; then
      command -v "$candidate"; return 0
    fi
  done
  log "Python 3.10-3.12 is required (python3.11 recommended)"; return 1
}

ensure_java() {
  if command -v java >/dev/null 2>&1; then
    local version
    version=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
    local major=${version%%.*}
    if [ "${major:-0}" -ge 17 ]; then return 0; fi
    log "Java $version found; Spark needs Java 17 or newer"
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing OpenJDK 17 (apt-get)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    log "Java 17+ is required for Spark: install a JRE (e.g. openjdk-17-jre-headless) and re-run"; return 1
  fi
}

ensure_chromium() {  # headless Chromium, for the browser tests of the pipeline pages (they skip without it)
  [ -x /usr/bin/chromium ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing chromium (apt-get) for the pipeline pages' browser tests"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } ||
      log "chromium could not be installed: the pipeline pages' browser tests will skip"
  else
    log "chromium is missing: the pipeline pages' browser tests will skip (install Debian's package chromium)"
  fi
}

make_venv() {  # make_venv DIR LOCKFILE
  local dir=$1 lock=$2 stamp
  stamp="$dir/.cdc-lock.sha256"
  local want
  want=$(cat "$lock" pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ -x "$dir/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    log "$dir is up to date"; return 0
  fi
  local python
  python=$(pick_python)
  [ -x "$dir/bin/python" ] || { log "creating $dir with $python"; "$python" -m venv "$dir"; }
  "$dir/bin/python" -m pip install -q --upgrade pip uv 2>/dev/null || "$dir/bin/python" -m pip install --upgrade pip uv
  log "installing $(grep -c '==' "$lock") pinned packages into $dir (first time: a few minutes)"
  local quiet=-q  # on a terminal, uv shows its progress: resolving, downloading, installing
  [ -t 2 ] && quiet=
  # shellcheck disable=SC2086  # an empty $quiet is no argument
  "$dir/bin/uv" pip install --python "$dir/bin/python" $quiet --compile-bytecode -r "$lock"
  "$dir/bin/uv" pip install --python "$dir/bin/python" -q --compile-bytecode -c "$lock" -e "$root[test]"
  echo "$want" > "$stamp"
  log "$dir ready"
}

make_sdk_venv() {  # the official tablestore SDK (it pins protobuf<6) on its own, for tests/sources/tablestore/test_tablestore_sdk.py
  local dir=.venv-tablestore-sdk pins="tablestore==6.4.8 protobuf==5.29.6" stamp want
  stamp="$dir/.cdc-lock.sha256"
  want=$(printf '%s' "$pins" | sha256sum | cut -d' ' -f1)
  if [ -x "$dir/bin/python" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    log "$dir is up to date"; return 0
  fi
  local python
  python=$(pick_python)
  [ -x "$dir/bin/python" ] || { log "creating $dir with $python"; "$python" -m venv "$dir"; }
  log "installing $pins into $dir"
  # shellcheck disable=SC2086  # the pins are separate arguments
  if [ -x .venv/bin/uv ]; then .venv/bin/uv pip install --python "$dir/bin/python" -q $pins
  else "$dir/bin/python" -m pip install -q $pins; fi
  echo "$want" > "$stamp"
  log "$dir ready"
}

ensure_java
ensure_chromium
make_venv .venv requirements/airflow3.lock
if [ "${1:-}" = "--airflow2" ]; then
  make_venv .venv-airflow2 requirements/airflow2.lock
fi
make_sdk_venv
