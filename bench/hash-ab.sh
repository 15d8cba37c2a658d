#!/usr/bin/env bash
# Two strata builds and Valkey, interleaved command by command: what a change to the RESP path
# costs or saves per request, beside the peer, in one run. Each server runs alone on CPU 0
# (strata with one worker), memtier_benchmark on CPU 1 with 4 connections. The three servers
# are started once and filled once with redis-py: 10,000 hashes of 10 fields (`user:N`, 8-byte
# names, 20-byte values, as bench/hash-ops.sh) and 10,000 strings of 20 bytes (`str:N`). Then,
# each round, each command runs on A, B and Valkey in turn for SECONDS: HGET, HSET, HINCRBY,
# HGETALL, GET, SET, PING, and MULTI + 5 SETs + EXEC (one request = one transaction there).
#
#   bench/hash-ab.sh MEMTIER VALKEY BUILD_A BUILD_B [SECONDS] [ROUNDS]
#
# DEPTH=16 (default) or 1 is memtier's pipeline depth (a transaction of 7 commands is sent
# 14 deep when DEPTH is 16); CONNS=4 (default) is memtier's connection count (CONNS=200: many
# clients, each wake-up of the server then finds more of them ready). Printed: each run's server CPU µs per request, then per command
# the medians over the rounds and the median of each round's B/A and B/Valkey ratios (a
# paired median cancels the VM's drift between rounds).
set -euo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
build_a=${3:?strata binary A}
build_b=${4:?strata binary B}
seconds=${5:-2}
rounds=${6:-7}
depth=${DEPTH:-16}
conns=${CONNS:-4}
source bench/lib.sh
declare -A ports=([A]=23981 [B]=23982 [V]=23983) pids
out=$(mktemp)
trap 'kill ${pids[*]} 2>/dev/null || true; rm -f "$out"' EXIT

for name in A B V; do
  port=${ports[$name]}
  case $name in
    A) strata=$build_a; start_resp strata 1GiB ;;
    B) strata=$build_b; start_resp strata 1GiB ;;
    V) start_resp valkey 1GiB ;;
  esac || { echo "$name did not start" >&2; exit 1; }
  pids[$name]=$pid
  fill_user_hashes "$port" 1
done

# each LABEL PREFIX REQUESTS_COLUMN DEPTH MEMTIER_COMMAND_ARGS...: one run on A, B and Valkey
# in turn; prints each run's server CPU µs per request and the share of its core the server
# used (near 100%: the server was the bound; well below: memtier was).
each() {
  local label=$1 prefix=$2 column=$3 pipeline=$4 name pid before after requests
  shift 4
  for name in A B V; do
    pid=${pids[$name]}
    before=$(cpu_ticks "$pid")
    requests=$(taskset -c 1 "$memtier" -s 127.0.0.1 -p "${ports[$name]}" -P redis -t 1 -c "$conns" \
      --pipeline="$pipeline" --test-time="$seconds" --hide-histogram -d 20 \
      --key-prefix="$prefix" --key-minimum=1 --key-maximum=10000 "$@" 2>/dev/null \
      | awk -v c="$column" '$1 == c {print $2}')
    after=$(cpu_ticks "$pid")
    python3 -c "
ticks = $after - $before
print(f'$label $name {ticks * 1e6 / 100 / ($requests * $seconds):.3f} {ticks / $seconds:.0f}%')" \
      | tee -a "$out"
  done
}

tx=(--command="MULTI")
for _ in 1 2 3 4 5; do tx+=(--command="SET __key__ __data__"); done
tx+=(--command="EXEC")
tx_depth=$depth
[ "$depth" -gt 1 ] && tx_depth=$((depth / 8 * 7))
for round in $(seq "$rounds"); do
  echo "round $round (label server cpu_us_per_request server_core_share)"
  each HGET user: Totals "$depth" --command="HGET __key__ field002"
  each HSET user: Totals "$depth" --command="HSET __key__ field001 __data__"
  each HINCRBY user: Totals "$depth" --command="HINCRBY __key__ counter 1"
  each HGETALL user: Totals "$depth" --command="HGETALL __key__"
  each GET str: Totals "$depth" --command="GET __key__"
  each SET str: Totals "$depth" --command="SET __key__ __data__"
  each PING str: Totals "$depth" --command="PING"
  each TX str: Execs "$tx_depth" "${tx[@]}"
done

python3 - "$out" "$depth" "$conns" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    label, name, cpu, _share = line.split()
    runs[(label, name)].append(float(cpu))
print(f"medians, DEPTH={sys.argv[2]}, CONNS={sys.argv[3]} (TX: µs per transaction)")
print("command      A       B       Valkey  B/A (paired)  B/Valkey (paired)")
for label in dict.fromkeys(l for l, _ in runs):
    a, b, v = (runs[(label, n)] for n in "ABV")
    ba = statistics.median(y / x for x, y in zip(a, b))
    bv = statistics.median(y / x for x, y in zip(v, b))
    print(f"{label:<10} {statistics.median(a):7.3f} {statistics.median(b):7.3f} "
          f"{statistics.median(v):7.3f}  {ba:12.3f}  {bv:17.3f}")
PY
