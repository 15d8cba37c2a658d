#!/usr/bin/env bash
# Transactions: MULTI + 5 SETs + EXEC, side by side in one run with a load generator we did not
# write (memtier_benchmark's arbitrary-command mode, which sends a connection's commands in the
# order given), server pinned to CPU 0 and memtier to CPU 1, one server at a time: strata,
# Valkey and Redis. Printed per server, round and pipeline depth: transactions per second and
# server CPU time per transaction (utime + stime from /proc over the measured run ÷ EXECs).
#
#   bench/transactions.sh MEMTIER VALKEY_SERVER [SECONDS] [ROUNDS]
#
# MEMTIER: memtier_benchmark 2.x; VALKEY_SERVER: valkey-server 8.0.1 built from its public
# source (make BUILD_TLS=no); Redis is Debian's. STRATA=PATH runs another strata binary.
set -euo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
seconds=${3:-6}
rounds=${4:-3}
strata=${STRATA:-target/release/strata}
port=23990
source bench/lib.sh
start() { start_resp "$1" 256MiB || { echo "$1 did not start" >&2; exit 1; }; }

commands=(--command="MULTI")
for _ in 1 2 3 4 5; do commands+=(--command="SET __key__ __data__"); done
commands+=(--command="EXEC")

for round in $(seq "$rounds"); do
  for server in strata valkey redis; do
    for pipeline in 1 14; do
      start $server
      before=$(cpu_ticks $pid)
      execs=$(taskset -c 1 "$memtier" -s 127.0.0.1 -p $port -P redis -t 1 -c 4 \
        --pipeline=$pipeline --test-time="$seconds" --hide-histogram -d 32 \
        --key-maximum=100000 "${commands[@]}" 2>/dev/null | awk '/^Execs/ {print $2}')
      after=$(cpu_ticks $pid)
      kill $pid; wait $pid 2>/dev/null || true
      python3 -c "
tps = float('$execs'); ticks = $after - $before
print(f'round $round $server pipeline=$pipeline tx/s={tps:.0f} cpu_us_per_tx={ticks * 1e6 / 100 / (tps * $seconds):.2f}')"
    done
  done
done
