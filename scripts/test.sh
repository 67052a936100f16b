#!/usr/bin/env bash
# The README's test command: set up (idempotent), lint, then every test (unit and integration).
# Extra arguments go to pytest instead of the two default runs, e.g. scripts/test.sh tests/unit -x
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
# Test-only tools the lab itself does not need: vagrant, for `vagrant validate` of the lab VM.
if ! command -v vagrant >/dev/null 2>&1; then
    echo "[test] installing vagrant (for vagrant validate)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends vagrant \
        || echo "[test] vagrant did not install: its test will skip and say why"
fi
cd "$ROOT"
VENV="${ZCUBE_VENV:-$ROOT/.venv}"
echo "[test] ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
echo "[test] shellcheck"
shellcheck scripts/*.sh .ci/run
# The 30 slowest tests are listed at the end of each pytest: where the suite's wall time goes
# (issue 48).
if [ "$#" -gt 0 ]; then
    echo "[test] pytest $*"
    exec "$VENV/bin/python" -m pytest --durations=30 "$@"
fi
# The unit tests on both cores (pytest-xdist); then the integration tests one at a time, as
# their labs must be (one lab on the machine at a time). Both parts run whatever the first gave.
# Ctrl-C: pytest ends with its own exit code, so without this the lab tests would start next.
trap 'echo "[test] interrupted"; exit 130' INT TERM
echo "[test] pytest tests/unit (2 workers)"
unit=0
"$VENV/bin/python" -m pytest --durations=30 -n 2 tests/unit || unit=$?
echo "[test] pytest tests/integration"
integration=0
"$VENV/bin/python" -m pytest --durations=30 tests/integration || integration=$?
echo "[test] tests/unit exit $unit, tests/integration exit $integration"
if [ "$unit" -ne 0 ]; then exit "$unit"; fi
exit "$integration"
