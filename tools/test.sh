#!/usr/bin/env bash
# The whole test suite, as CI runs it: set-up, lint, types, then pytest (arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
tools/system-deps.sh
tools/node-deps.sh

echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy (mqcore, strict)"
.venv/bin/mypy
echo "== pytest"
mkdir -p test-output
exec .venv/bin/pytest "$@"
