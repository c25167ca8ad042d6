#!/usr/bin/env bash
# Node packages the Kafka compatibility tests drive (kafkajs), installed when missing or when
# their pinned versions changed: into tests/kafka_listener/e2e/js/node_modules (git-ignored),
# from the package.json and package-lock.json beside it. Node and npm come from
# tools/system-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/../tests/kafka_listener/e2e/js"

want=$(cat package.json $(ls package-lock.json 2>/dev/null) | sha256sum | cut -d' ' -f1)
have=$(cat node_modules/.cairn-installed 2>/dev/null || true)
if [ "$want" != "$have" ]; then
    echo "node-deps: installing the Kafka clients of the compatibility tests (kafkajs)"
    if [ -f package-lock.json ]; then
        npm ci --no-audit --no-fund --loglevel=error
    else
        npm install --no-audit --no-fund --loglevel=error
    fi
    echo "$want" > node_modules/.cairn-installed
fi
