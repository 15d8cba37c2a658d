#!/usr/bin/env bash
# Instructions per request of the RESP commands of bench/hash-ab.sh, counted by valgrind's
# callgrind: repeatable for the same binary and load whatever else the machine does, so an A/B
# of a small change reads in one run where CPU time on this VM drifts more than the change.
#
#   bench/instructions-ab.sh MEMTIER VALKEY STRATA_BINARY...
#
# Each server runs alone under callgrind, which counts only inside the function that parses
# and runs a connection's input (strata: `Connection::process_input`; Valkey:
# `readQueryFromClient`): parse, lookup, the command, its reply; not the kernel, not the
# writes of the replies, not the background threads. It is filled with redis-py (2,000 hashes
# of 10 fields, `user:N`, 8-byte names, 20-byte values, and 2,000 strings of 20 bytes,
# `str:N`), then memtier_benchmark sends one command, 4 connections 16 deep, for LOW and then,
# on a fresh server, HIGH requests per connection; printed per command and server:
# (instructions(HIGH) - instructions(LOW)) / (4 × (HIGH - LOW)), which cancels the start, the
# fill and the connections' setup. A transaction's request is each of its 7 commands.
# LOW=2800 HIGH=28000 by default; COMMANDS="HGET TX" counts only those (default: all eight).
set -euo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
shift 2
[ $# -gt 0 ] || { echo "name at least one strata binary" >&2; exit 2; }
low=${LOW:-2800}
high=${HIGH:-28000}
port=23990
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# count SERVER_KIND BINARY REQUESTS PREFIX MEMTIER_ARGS...: the instructions callgrind counted.
count() {
  local kind=$1 binary=$2 requests=$3 prefix=$4 out=$work/callgrind.out pid
  shift 4
  rm -f "$out"
  case $kind in
    strata) valgrind --tool=callgrind --callgrind-out-file="$out" \
        --toggle-collect='*Connection::process_input*' \
        "$binary" serve --threads 1 --memory 256MiB --log-level warn \
        --resp-listen 127.0.0.1:$port --memcache-listen off --admin-listen off \
        >/dev/null 2>&1 & ;;
    valkey) valgrind --tool=callgrind --callgrind-out-file="$out" \
        --toggle-collect=readQueryFromClient \
        "$binary" --port $port --save '' --appendonly no >/dev/null 2>&1 & ;;
  esac
  pid=$!
  for _ in $(seq 600); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
  /usr/bin/python3 - $port <<'PY'
import redis, sys
r = redis.Redis(port=int(sys.argv[1]))
p = r.pipeline(transaction=False)
for i in range(1, 2001):
    p.hset(f"user:{i}", mapping={f"field{j:03d}": f"value-{i:08d}-{j:05d}" for j in range(10)})
    p.set(f"str:{i}", f"value-{i:08d}-00000")
p.execute()
PY
  "$memtier" -s 127.0.0.1 -p $port -P redis -t 1 -c 4 --pipeline=16 --requests="$requests" \
    --hide-histogram -d 20 --key-prefix="$prefix" --key-minimum=1 --key-maximum=2000 "$@" \
    >/dev/null 2>&1
  kill -INT "$pid"
  wait "$pid" 2>/dev/null || true
  awk '/^totals:/ {print $2}' "$out"
}

tx=(--command="MULTI")
for _ in 1 2 3 4 5; do tx+=(--command="SET __key__ __data__"); done
tx+=(--command="EXEC")
printf '%-8s' command
for binary in "$@"; do printf ' %14s' "$(basename "$binary")"; done
printf ' %14s\n' valkey
for command in ${COMMANDS:-HGET HSET HINCRBY HGETALL GET SET PING TX}; do
  case $command in
    HGET) load=(user: --command="HGET __key__ field002") ;;
    HSET) load=(user: --command="HSET __key__ field001 __data__") ;;
    HINCRBY) load=(user: --command="HINCRBY __key__ counter 1") ;;
    HGETALL) load=(user: --command="HGETALL __key__") ;;
    GET) load=(str: --command="GET __key__") ;;
    SET) load=(str: --command="SET __key__ __data__") ;;
    PING) load=(str: --command="PING") ;;
    TX) load=(str: "${tx[@]}") ;;
  esac
  printf '%-8s' "$command"
  for server in "$@" valkey; do
    if [ "$server" = valkey ]; then kind=valkey binary=$valkey; else kind=strata binary=$server; fi
    lo=$(count "$kind" "$binary" "$low" "${load[@]}")
    hi=$(count "$kind" "$binary" "$high" "${load[@]}")
    printf ' %14s' "$(( (hi - lo) / (4 * (high - low)) ))"
  done
  printf '\n'
done
