#!/usr/bin/env bash
# Create or update the project's virtual environment (.venv). Safe to run every time: it
# reinstalls only when pyproject.toml (or this script) changed.
#
#   tools/bootstrap.sh runtime   what the broker needs (`make run`): Django, Channels, numpy ...
#   tools/bootstrap.sh [dev]     that plus the test suite's, the benchmarks' and Spark's
#                                packages (`make test`): Kafka clients, PySpark, Playwright ...
#
# A dev environment also serves `make run`; a runtime one is topped up by `make test`.
#
# Django 6 needs Python >= 3.12. Cairn is built and tested on 3.12, so that comes first: the
# interpreter is, in order, $CAIRN_PYTHON, python3.12 on PATH, the newest pyenv 3.12.x under
# ~/.pyenv/versions, then any newer one (python3.13, pyenv 3.13+, python3 if >= 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:-dev}
case "$profile" in
    runtime) spec='.' ;;
    dev) spec='.[dev]' ;;
    *)
        echo "bootstrap: unknown profile '$profile' (runtime or dev)" >&2
        exit 2
        ;;
esac

find_python() {
    local candidates=()
    [ -n "${CAIRN_PYTHON:-}" ] && candidates+=("$CAIRN_PYTHON")
    local pyenv="${PYENV_ROOT:-$HOME/.pyenv}/versions"
    candidates+=(python3.12)
    for d in $(ls -d "$pyenv"/3.12.* 2>/dev/null | sort -rV); do
        candidates+=("$d/bin/python3")
    done
    candidates+=(python3.13)
    for d in $(ls -d "$pyenv"/3.1[3-9]* 2>/dev/null | sort -rV); do
        candidates+=("$d/bin/python3")
    done
    candidates+=(python3)
    for c in "${candidates[@]}"; do
        if command -v "$c" >/dev/null 2>&1 &&
            "$c" -c 'import sys, venv; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
    if ! py=$(find_python); then
        echo "bootstrap: Cairn needs Python 3.12 or newer (Django 6); none found." >&2
        echo "bootstrap: install one, or point CAIRN_PYTHON at it." >&2
        exit 1
    fi
    echo "bootstrap: creating .venv with $py ($("$py" --version))"
    rm -rf .venv
    "$py" -m venv .venv
fi

want=$(cat pyproject.toml tools/bootstrap.sh | sha256sum | cut -d' ' -f1)
read -r have_hash have_profile 2>/dev/null < .venv/.cairn-installed || true
if [ "$want" != "${have_hash:-}" ] || { [ "$profile" = dev ] && [ "${have_profile:-}" != dev ]; }; then
    echo "bootstrap: installing Cairn ($profile) and its dependencies into .venv"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e "$spec"
    echo "$want $profile" > .venv/.cairn-installed
fi
