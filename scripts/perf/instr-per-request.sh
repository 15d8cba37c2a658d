#!/bin/bash
# User-space instructions per request of `strata serve` (one worker) under a fixed pipelined load,
# counted by callgrind, so the figure repeats exactly from run to run (the kernel's TCP path is not
# counted: see docs/BENCHMARKS.md for CPU time, which includes it).
#
# Usage: scripts/perf/instr-per-request.sh [mc|resp] [REQUESTS] [STRATA_BINARY]
# Load: 20 connections, batches of 16 requests (90% GET / 10% SET, 64-byte values, 16-byte keys
# over 100,000 preloaded keys, seeded), each batch sent whole and its replies awaited.
# Needs valgrind and python3; the server is pinned to CPU 0 and the client to CPU 1.
set -eu
PROTO=${1:-mc}; N=${2:-160000}; BIN=${3:-target/release/strata}
HERE=$(cd "$(dirname "$0")" && pwd)
PORT=$((20000 + RANDOM % 20000))
OUT=$(mktemp -d)
taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.%p" --instr-atstart=no \
    "$BIN" serve --memcache-listen 127.0.0.1:$PORT --resp-listen 127.0.0.1:$((PORT + 1)) \
    --admin-listen off --threads 1 --memory 256MiB >"$OUT/server.log" 2>&1 &
SP=$!
[ "$PROTO" = resp ] && PORT=$((PORT + 1))
for _ in $(seq 100); do sleep 0.2; (echo >/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; done
taskset -c 1 python3 "$HERE/fixedload.py" $PORT "$PROTO" 0 preload
taskset -c 1 python3 "$HERE/fixedload.py" $PORT "$PROTO" 3200
callgrind_control -i on $SP >/dev/null 2>&1
callgrind_control -z $SP >/dev/null 2>&1
taskset -c 1 python3 "$HERE/fixedload.py" $PORT "$PROTO" "$N"
callgrind_control -d $SP >/dev/null 2>&1
kill $SP; wait $SP 2>/dev/null || true
IR=$(grep '^summary:' "$OUT/cg.$SP.1" | cut -d' ' -f2)
echo "$PROTO: $(python3 -c "print(round($IR / $N))") user instructions per request ($IR over $N); profile: callgrind_annotate $OUT/cg.$SP.1"
