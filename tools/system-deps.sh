#!/usr/bin/env bash
# Debian packages the test suite needs, installed when missing (the machines run as root).
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# Browser tests: Playwright drives Debian's chromium via executable_path.
[ -x /usr/bin/chromium ] || need+=(chromium)
# Kafka compatibility tests: Debian's kcat (librdkafka 2.0.2, older than its compression fix)
# and node + npm for kafkajs (tools/node-deps.sh installs the npm package).
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)

if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
        echo "system-deps: missing ${need[*]}; install them with apt-get as root" >&2
        exit 1
    fi
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    echo "system-deps: installing ${need[*]}"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
