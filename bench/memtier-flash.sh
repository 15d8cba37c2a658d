#!/usr/bin/env bash
# Cross-check of the flash-tier comparison with a load generator we did not write:
# memtier_benchmark against memcached with extstore and strata with --flash, same sizes, same
# pinning (server on CPU 0, memtier on CPU 1), one server at a time.
#
#   bench/memtier-flash.sh MEMTIER_BINARY FLASH_DIR [KEYS] [VALUE_BYTES] [MEMORY_MIB] [FLASH_MIB]
#
# Defaults: 8,000,000 keys of 1,024 B (8 GiB offered), 256 MiB of memory, a 4 GiB flash file.
# memtier is not packaged by Debian: build it from github.com/RedisLabs/memtier_benchmark
# (autoreconf -ivf && ./configure && make; needs libevent-dev libssl-dev zlib1g-dev).
# Per server: a fill (every key once, 20 connections × 8 pipelined), then 20 s of SET:GET 1:9
# with uniform keys and 20 s with zipf 0.9 keys; memtier's own totals are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
dir=${2:?directory for the flash files (a real disk, not tmpfs)}
keys=${3:-8000000}
value=${4:-1024}
memory=${5:-256}
flash=${6:-4096}
strata=target/release/strata
[ -x "$strata" ] || cargo build --release -p strata
mkdir -p "$dir"

run_memtier() {
  taskset -c 1 "$memtier" -s 127.0.0.1 -p "$1" -P memcache_text -t 1 -c 20 --pipeline=8 \
    -d "$value" --key-minimum=1 --key-maximum="$keys" --hide-histogram "${@:2}" 2>/dev/null |
    grep -E "^(Sets|Gets|Totals) " || true
}

measure() {
  local name=$1 port=$2
  echo "== $name: fill $keys keys of $value B"
  run_memtier "$port" --ratio=1:0 --key-pattern=P:P --requests=allkeys
  echo "== $name: SET:GET 1:9, uniform keys, 20 s"
  run_memtier "$port" --ratio=1:9 --key-pattern=R:R --test-time=20
  echo "== $name: SET:GET 1:9, zipf 0.9 keys, 20 s"
  run_memtier "$port" --ratio=1:9 --key-pattern=Z:Z --key-zipf-exp=0.9 --test-time=20
}

source bench/lib.sh

rm -f "$dir/mc.ext" "$dir/strata.flash"
taskset -c 0 memcached -u nobody -t 1 -m "$memory" -p 22211 -U 0 -l 127.0.0.1 -c 4096 \
  -o "ext_path=$dir/mc.ext:${flash}m" &
pid=$!
wait_port 22211
measure "memcached $(memcached -V | cut -d' ' -f2) extstore" 22211
kill "$pid"; wait "$pid" 2>/dev/null || true
rm -f "$dir/mc.ext"

taskset -c 0 "$strata" serve --threads 1 --memory "${memory}MiB" --flash "$dir/strata.flash" \
  --flash-size "${flash}MiB" --memcache-listen 127.0.0.1:22212 --resp-listen off \
  --admin-listen off --log-level warn &
pid=$!
wait_port 22212
measure "strata --flash" 22212
kill "$pid"; wait "$pid" 2>/dev/null || true
rm -f "$dir/strata.flash"
