#!/usr/bin/env bash
# Set up (first time) and start the broker on embedded defaults: SQLite, in-memory channel
# layer, services in-process. No Redis or database server needed.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh runtime
exec .venv/bin/python manage.py runbroker "$@"
