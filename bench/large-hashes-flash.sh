#!/bin/bash
# Large hashes past memory: strata with its flash tier beside Valkey 8.0.1 and Redis 7.0.15
# with the same memory (maxmemory, allkeys-lru). HASHES hashes (`lh:1` ..) of 100 fields of
# 100-byte values (about 10 KB each: a chunked hash in strata, a hashtable in the peers),
# about 3× MEMORY in all, are written once by memtier_benchmark (--command mode, each key once),
# then memtier reads one field of uniformly random hashes for SECONDS (4 connections, 16
# pipelined; server on CPU 0, memtier on CPU 1). Printed: the fill's rate (memtier's, noisy
# for a fill of about a second) and server CPU per HSET, the hashes kept
# (DBSIZE), the reads' rate and server CPU per HGET, then the hit ratio of 2,000 HGETs of
# random hashes after them (redis-py; strata's keyspace_hits counts string reads only).
# A strata build before large items demoted to flash (af357f0) drops every evicted hash.
#
#   bench/large-hashes-flash.sh MEMTIER VALKEY FLASH_DIR [seconds] [hashes] [memory_mib]
#
# SERVERS="strata valkey redis" picks the servers; STRATA=PATH another strata build;
# PATTERN=G reads Gaussian-distributed keys (memtier's --command-key-pattern) instead of uniform.
set -uo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
flash_dir=${3:?a directory on the disk for the flash file}
seconds=${4:-10}
hashes=${5:-20000}
memory_mib=${6:-64}
strata=${STRATA:-target/release/strata}
port=23998
source bench/lib.sh
fields=""
for f in $(seq 0 99); do fields="$fields f$f __data__"; done
for server in ${SERVERS:-strata valkey redis}; do
  rm -f "$flash_dir/large-hashes.flash"
  STRATA_ARGS="--flash $flash_dir/large-hashes.flash --flash-size 2GiB" \
    start_resp "$server" "${memory_mib}MiB" || { echo "$server did not start" >&2; exit 1; }
  if [ "$server" != strata ]; then
    redis-cli -p $port config set maxmemory "${memory_mib}mb" >/dev/null
    redis-cli -p $port config set maxmemory-policy allkeys-lru >/dev/null
  fi
  fill_ticks=$(cpu_ticks $pid)
  # (memtier's own rate: its process ends on a whole second of its report loop.)
  fill_ops=$(taskset -c 1 "$memtier" -s 127.0.0.1 -p $port -P redis -t 1 -c 4 --pipeline=4 \
    --requests=$((hashes / 4)) --hide-histogram -d 100 --key-prefix=lh: --key-minimum=1 \
    --key-maximum="$hashes" --command="HSET __key__$fields" --command-key-pattern=P \
    2>/dev/null | awk '/^Totals/ {print $2}')
  fill_ticks=$(( $(cpu_ticks $pid) - fill_ticks ))
  sleep 2 # strata's flash thread writes what was sealed
  kept=$(redis-cli -p $port dbsize); before=$(cpu_ticks $pid)
  ops=$(taskset -c 1 "$memtier" -s 127.0.0.1 -p $port -P redis -t 1 -c 4 --pipeline=16 \
    --test-time="$seconds" --hide-histogram --key-prefix=lh: --key-minimum=1 \
    --key-maximum="$hashes" --command="HGET __key__ f7" --command-key-pattern="${PATTERN:-R}" \
    2>/dev/null | awk '/^Totals/ {print $2}')
  after=$(cpu_ticks $pid)
  rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
  hit_ratio=$(/usr/bin/python3 - $port "$hashes" <<'PY'
import random, redis, sys
r = redis.Redis(port=int(sys.argv[1])); hashes = int(sys.argv[2])
rng = random.Random(7)
p = r.pipeline(transaction=False)
for _ in range(2000):
    p.hget(f"lh:{rng.randint(1, hashes)}", "f7")
print(f"{sum(v is not None for v in p.execute()) / 2000:.3f}")
PY
)
  python3 -c "
ops = float('$ops'); ticks = $after - $before
fill_ops = float('$fill_ops')
print(f'$server hashes=$hashes memory=${memory_mib}MiB fill_hsets_per_s={fill_ops:.0f} '
      f'fill_cpu_us_per_hset={$fill_ticks * 1e4 / $hashes:.1f} keys=${PATTERN:-R} '
      f'kept={$kept} hget_ops_per_s={ops:.0f} cpu_us_per_hget={ticks * 1e6 / 100 / max(ops * $seconds, 1):.2f} '
      f'hit_ratio_after={$hit_ratio} rss_mib={$rss / 1024:.0f}')"
  kill $pid; wait $pid 2>/dev/null
done
rm -f "$flash_dir/large-hashes.flash"
