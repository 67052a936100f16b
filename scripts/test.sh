#!/usr/bin/env bash
# The README's test command: set up (idempotent), lint, then every test (unit and integration).
# Extra arguments go to pytest, e.g. scripts/test.sh tests/unit -x
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
echo "[test] pytest"
# The 30 slowest tests are listed at the end: where the suite's wall time goes (issue 48).
exec "$VENV/bin/python" -m pytest --durations=30 "${@:-tests}"
