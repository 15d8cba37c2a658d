#!/bin/bash
# Overwrites on a freshly started server: server CPU per request and the RSS it holds after
# SECONDS of HSET (10-field hashes, one field rewritten) or SET (32-byte values) over 10,000
# keys, 16 pipelined, 4 connections; server on CPU 0 with 1 GiB (one worker), memtier on CPU 1.
# What it shows: whether the server reuses memory it already backs or touches new pages as it
# writes (strata's DRAM pool before its recycling: every segment once, 1 GiB of page faults).
#
#   bench/fresh-overwrites.sh MEMTIER VALKEY [seconds] [rounds]
#
# SERVERS="strata valkey redis" picks the servers; STRATA=PATH one strata build, or
# STRATA_B=PATH a second one, run as "strata-b" right after each "strata" (an A/B).
set -uo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
seconds=${3:-5}; rounds=${4:-3}
strata_a=${STRATA:-target/release/strata}
port=23997
source bench/lib.sh
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
servers=${SERVERS:-strata valkey redis}
[ -n "${STRATA_B:-}" ] && servers=${servers/strata/strata strata-b}
for round in $(seq "$rounds"); do
  for server in $servers; do
    for cmd in "HSET __key__ field001 __data__" "SET __key__ __data__"; do
      case $server in
        strata) strata=$strata_a; start_resp strata 1GiB ;;
        strata-b) strata=$STRATA_B; start_resp strata 1GiB ;;
        *) start_resp "$server" 1GiB ;;
      esac
      if [[ $cmd == HSET* ]]; then
        /usr/bin/python3 -c "
import redis; r = redis.Redis(port=$port); p = r.pipeline(transaction=False)
for i in range(1, 10001):
    p.hset(f'user:{i}', mapping={f'field{j:03d}': 'x' * 20 for j in range(10)})
    if i % 500 == 0: p.execute()
assert r.hlen('user:1') == 10"
      fi
      before=$(cpu_ticks $pid)
      ops=$(taskset -c 1 "$memtier" -s 127.0.0.1 -p $port -P redis -t 1 -c 4 --pipeline=16 \
        --test-time="$seconds" --hide-histogram -d 20 --key-prefix=user: --key-minimum=1 \
        --key-maximum=10000 --command="$cmd" 2>/dev/null | awk '/^Totals/ {print $2}')
      after=$(cpu_ticks $pid)
      rss=$(rss_kib $pid)
      python3 -c "
ops=float('$ops'); t=$after-$before
print(f'round $round $server ${cmd%% *} ops/s={ops:.0f} cpu_us_per_op={t*1e6/100/(ops*$seconds):.2f} rss_mib={$rss/1024:.1f}')"
      kill $pid; wait $pid 2>/dev/null
    done
  done
done
