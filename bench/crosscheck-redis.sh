#!/bin/sh
# Cross-checks strata-bench against redis-benchmark on the same workload: GET of 64 B values,
# 100,000 keys (all present), 20 connections x pipeline 16, Redis pinned to CPU 0 and each
# generator pinned to CPU 1. Runs the trio ROUNDS times (default 3), alternating:
# redis-benchmark; strata-bench --pipeline-batches (redis-benchmark's send-16-wait-16 pattern);
# strata-bench default (memtier's pattern: refill each slot as its reply arrives).
# Usage: bench/crosscheck-redis.sh [ROUNDS]
set -eu
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
BENCH=${CARGO_TARGET_DIR:-target}/release/strata-bench
cargo build --release -p strata-bench >/dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
taskset -c 0 redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --maxmemory 256mb --maxmemory-policy allkeys-lru --io-threads 1 >/dev/null &
REDIS=$!
trap 'kill $REDIS 2>/dev/null || true' EXIT INT TERM
sleep 0.5
# Both generators' key spaces present: redis-benchmark's "key:%012d" and ours ("k%015d").
taskset -c 1 redis-benchmark -p "$PORT" -t set -n 1000000 -r 100000 -d 64 -c 20 -P 16 -q >/dev/null
"$BENCH" run --target "127.0.0.1:$PORT" --protocol resp --keyspace 100000 --value-size 64 \
    --preload --duration-secs 0 --cpu 1 >/dev/null
for round in $(seq "$ROUNDS"); do
    echo "== round $round: redis-benchmark"
    taskset -c 1 redis-benchmark -p "$PORT" -t get -n 4000000 -r 100000 -d 64 -c 20 -P 16 \
        --threads 1 2>/dev/null | tr '\r' '\n' | grep -E "throughput summary|latency summary|avg|^ +[0-9]" | tail -4
    for mode in --pipeline-batches ""; do
        echo "== round $round: strata-bench ${mode:-(refill each slot)}"
        taskset -c 1 "$BENCH" run --target "127.0.0.1:$PORT" --protocol resp --keyspace 100000 \
            --value-size 64 --ratio 1:0 --connections 20 --pipeline 16 --warmup-secs 1 \
            --duration-secs 8 --cpu 1 --server-pid "$REDIS" $mode | tail -n +4
    done
done
