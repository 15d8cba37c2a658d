#!/usr/bin/env bash
# Churn: what each server keeps of a working set it has room for, under overwrites. Side by side
# in one run, with a load generator we did not write (memtier_benchmark), server pinned to CPU 0
# and memtier to CPU 1, one server at a time, every server given the same memory:
# memcached (-m), Redis and Valkey (maxmemory, allkeys-lru) and strata (--memory).
#
#   bench/churn.sh MEMTIER VALKEY_SERVER [MEMORY_MIB] [SECONDS] [CELLS...]
#
# MEMTIER: memtier_benchmark 2.x (github.com/RedisLabs/memtier_benchmark: autoreconf -ivf &&
# ./configure && make; needs libevent-dev libssl-dev zlib1g-dev). VALKEY_SERVER: valkey-server
# 8.0.1 built from its public source (make BUILD_TLS=no). Redis and memcached are Debian's.
#
# A cell is VALUE_BYTES:WORKING_SET_PERCENT:SET_GET_RATIO:KEY_PATTERN, the working set being the
# values' bytes as a share of the memory (keys = memory × percent / value bytes). Per cell and
# server: a fill (every key once), then SECONDS of mixed traffic (20 connections, 4 pipelined);
# printed: GET hit ratio of the mixed phase, its ops/s, keys held and evictions at the end, the
# server's RSS, and for strata the cleaner's write amplification and longest pass.
# Default cells: the issue's table and the grid around it (1 KiB and 100 B values; 50-150%).
# STRATA=PATH runs another strata binary (an older build, for an A/B); PEERS=0 runs strata only;
# CONNECTIONS=N opens N connections instead of 20.
set -euo pipefail
cd "$(dirname "$0")/.."
memtier=${1:?memtier_benchmark binary}
valkey=${2:?valkey-server binary}
memory=${3:-64}
seconds=${4:-10}
shift $(($# < 4 ? $# : 4))
cells=("$@")
if [ ${#cells[@]} -eq 0 ]; then
  cells=(1000:50:1:1:R 1000:80:1:1:R 1000:100:1:1:R 1000:150:1:1:R
    1000:50:1:10:G 1000:80:1:10:G 100:50:1:1:R 100:80:1:1:R 100:80:1:10:G)
fi
strata=${STRATA:-target/release/strata}
[ -x "$strata" ] || cargo build --release -p strata
peers=${PEERS:-1}
command -v redis-cli >/dev/null || { echo "needs redis-cli (redis-tools)" >&2; exit 1; }

source bench/lib.sh

# memtier PROTOCOL PORT KEYS VALUE ARGS...: memtier's Totals/Gets lines.
run_memtier() {
  taskset -c 1 "$memtier" -s 127.0.0.1 -p "$2" -P "$1" -t 1 -c "${CONNECTIONS:-20}" --pipeline=4 -d "$4" \
    --key-minimum=1 --key-maximum="$3" --hide-histogram "${@:5}" 2>/dev/null
}

# The Gets line's hits/s and misses/s, as a hit ratio; and the Totals line's ops/s.
summarize() {
  awk '/^Gets/ { hits = $3; misses = $4 } /^Totals/ { ops = $2 }
    END { total = hits + misses; printf "hit_ratio=%.3f ops_per_s=%d", (total > 0 ? hits / total : 0), ops }'
}

rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }

# held PROTOCOL PORT: keys held, evictions.
held() {
  if [ "$1" = memcache_text ]; then
    python3 - "$2" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"stats\r\n")
data = b""
while not data.endswith(b"END\r\n"):
    data += s.recv(65536)
stats = dict(l.split()[1:3] for l in data.decode().splitlines() if l.startswith("STAT"))
print(f"keys={stats['curr_items']} evictions={stats['evictions']}", end="")
PY
  else
    local keys ev
    keys=$(redis-cli -p "$2" dbsize)
    ev=$(redis-cli -p "$2" info stats | awk -F: '/^evicted_keys:/ { print $2 }' | tr -d '\r')
    printf "keys=%d evictions=%d" "$keys" "$ev"
  fi
}

strata_extra() {
  redis-cli -p "$1" info strata | tr -d '\r' |
    awk -F: '/^memory_write_amplification/ { wa = $2 } /^memory_cleaner_pass_max_us/ { mx = $2 }
      /^memory_dead_bytes/ { dead = $2 } END { printf " write_amp=%s pass_max_us=%s dead_bytes=%s", wa, mx, dead }'
}

# cell NAME PROTOCOL PORT PID VALUE KEYS RATIO PATTERN
measure() {
  local name=$1 proto=$2 port=$3 pid=$4 value=$5 keys=$6 ratio=$7 pattern=$8
  run_memtier "$proto" "$port" "$keys" "$value" --ratio=1:0 --key-pattern=P:P --requests=allkeys >/dev/null
  local line
  line=$(run_memtier "$proto" "$port" "$keys" "$value" --ratio="$ratio" \
    --key-pattern="$pattern:$pattern" --test-time="$seconds" | summarize)
  printf "%-22s %s %s rss_kib=%s" "$name" "$line" "$(held "$proto" "$port")" "$(rss_kib "$pid")"
  [ "$name" = strata ] && strata_extra "$port"
  echo
}

stop() { kill "$1"; wait "$1" 2>/dev/null || true; }

for cell in "${cells[@]}"; do
  IFS=: read -r value percent sets gets pattern <<<"$cell"
  keys=$((memory * 1048576 * percent / 100 / value))
  ratio="$sets:$gets"
  echo "== $value B values, working set $percent% of ${memory} MiB ($keys keys), SET:GET $ratio, keys $pattern, $seconds s"

  if [ "$peers" = 1 ]; then
    taskset -c 0 memcached -u nobody -t 1 -m "$memory" -p 23211 -U 0 -l 127.0.0.1 -c 4096 &>/dev/null &
    pid=$!; wait_port 23211
    measure "memcached $(memcached -V | cut -d' ' -f2)" memcache_text 23211 $pid "$value" "$keys" "$ratio" "$pattern"
    stop $pid

    for server in redis-server "$valkey"; do
      taskset -c 0 "$server" --port 23212 --bind 127.0.0.1 --save '' --appendonly no \
        --maxmemory "${memory}mb" --maxmemory-policy allkeys-lru --loglevel warning &>/dev/null &
      pid=$!; wait_port 23212
      version=$("$server" --version | grep -o 'v=[0-9.]*' | cut -c3-)
      measure "$(basename "$server" -server) $version" redis 23212 $pid "$value" "$keys" "$ratio" "$pattern"
      stop $pid
    done
  fi

  taskset -c 0 "$strata" serve --threads 1 --memory "${memory}MiB" --resp-listen 127.0.0.1:23213 \
    --memcache-listen off --admin-listen off --log-level warn &>/dev/null &
  pid=$!; wait_port 23213
  measure strata redis 23213 $pid "$value" "$keys" "$ratio" "$pattern"
  stop $pid
done
