#!/usr/bin/env bash
# Create or update the project's virtual environment (.venv) with everything the broker and
# the test suite need. Safe to run every time: it reinstalls only when pyproject.toml changed.
#
# Django 6 needs Python >= 3.12. Cairn is built and tested on 3.12, so that comes first: the
# interpreter is, in order, $CAIRN_PYTHON, python3.12 on PATH, the newest pyenv 3.12.x under
# ~/.pyenv/versions, then any newer one (python3.13, pyenv 3.13+, python3 if >= 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."

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
have=$(cat .venv/.cairn-installed 2>/dev/null || true)
if [ "$want" != "$have" ]; then
    echo "bootstrap: installing Cairn and its dependencies into .venv"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e '.[dev]'
    echo "$want" > .venv/.cairn-installed
fi
