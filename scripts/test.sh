#!/usr/bin/env bash
# Runs the whole strata test suite on a fresh Debian machine: installs what the tests use when
# it is missing (real memcached and Redis servers and clients, for differential and protocol
# tests), then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v memcached >/dev/null 2>&1 || need+=(memcached)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v memccapable >/dev/null 2>&1 || need+=(libmemcached-tools)
# strata block's NBD tests: libnbd's tools and its Python bindings (for Debian's python3).
command -v nbdinfo >/dev/null 2>&1 && command -v nbdcopy >/dev/null 2>&1 || need+=(libnbd-bin)
/usr/bin/python3 -c 'import nbd' >/dev/null 2>&1 || need+=(python3-libnbd)
# redis-py (Debian's python3-redis), which the transactions test drives as applications do.
/usr/bin/python3 -c 'import redis' >/dev/null 2>&1 || need+=(python3-redis)
# fio (its NBD engine, with verify) for write-back.
command -v fio >/dev/null 2>&1 || need+=(fio)
# systemd-analyze, which checks the service unit in packaging/systemd/.
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  # Debian starts freshly installed servers as services on 11211 and 6379, strata's default
  # ports. The tests start their own servers on free ports, so stop the ones installed just now
  # (services that were there before are left alone).
  for service in memcached redis-server; do
    if [[ " ${need[*]} " == *" $service "* ]]; then
      ($SUDO systemctl stop "$service" || $SUDO service "$service" stop) >/dev/null 2>&1 || true
    fi
  done
fi

cargo test --workspace --release "$@"
