#!/usr/bin/env bash
# Issue 12's database figure: MariaDB under sysbench oltp_read_write with a buffer pool small
# enough that I/O matters, on the same prepared database image served four ways:
#   plain         the image file through a loop device (direct I/O)
#   strata-wt     strata block --mode wt (DRAM cache), through nbdfuse and a loop device
#   strata-pt     strata block --mode pt, the same path without the cache (the path's own cost)
#   nbdkit-cache  nbdkit's file plugin with its cache filter, through nbdfuse and a loop device
#   strata-wb     strata block --mode wb, DRAM cache (a FLUSH writes every dirty line back)
#   strata-wb-pool  strata block --mode wb, cache in a pool on /dev/shm (the PMem stand-in: a
#                   FLUSH is a settle of the pool; lines go to the disk behind, by the cleaner)
# (This machine has no kernel NBD module; where it has one, `nbd-client -unix SOCKET /dev/nbd0
# -N disk` gives the block device directly: see docs/BENCHMARKS.md.)
#
#   bench/block-mariadb.sh DIR [TABLES] [ROWS] [SECONDS] [THREADS]
#   defaults: 8 tables × 1,000,000 rows (about 2 GiB), 60 s, 8 threads; buffer pool 128 MiB
#   TARGETS="plain strata-wb-pool" runs some of the targets only.
#
# Needs root, mariadb-server, sysbench, nbdkit, libnbd-bin (nbdfuse): apt-get install -y
# mariadb-server sysbench nbdkit libnbd-bin. Prints a Markdown table; logs stay in DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(realpath -m "${1:?directory on the disk under test}")
tables=${2:-8}
rows=${3:-1000000}
secs=${4:-60}
threads=${5:-8}
strata=$(realpath "${STRATA:-target/release/strata}")
[ -x "$strata" ] || { cargo build --release -p strata && strata=$(realpath target/release/strata); }
image_mib=$(( (tables * rows / 1000000 + 1) * 1024 + 1024 ))
mkdir -p "$dir/mnt" "$dir/fuse"
sock="$dir/nbd.sock"
mysock="$dir/mysql.sock"
loop=""
server_pid=""
fuse_pid=""

cleanup() {
  mysqladmin --socket="$mysock" -uroot shutdown >/dev/null 2>&1 || true
  umount "$dir/mnt" 2>/dev/null || true
  [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null || true
  fusermount -u "$dir/fuse" 2>/dev/null || umount "$dir/fuse" 2>/dev/null || true
  [ -n "$fuse_pid" ] && kill "$fuse_pid" 2>/dev/null || true
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true # a write-back server writes its dirty lines back
  fi
  loop="" fuse_pid="" server_pid=""
  sleep 0.5
}
trap cleanup EXIT

start_db() {
  mariadbd --user=root --datadir="$dir/mnt/data" --socket="$mysock" --skip-networking \
    --innodb-buffer-pool-size=128M --innodb-log-file-size=256M --innodb-flush-method=O_DIRECT \
    --pid-file="$dir/mysql.pid" > "$dir/mariadb-$1.log" 2>&1 &
  for _ in $(seq 600); do
    mysqladmin --socket="$mysock" -uroot ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "mariadbd did not start; see $dir/mariadb-$1.log" >&2
  return 1
}

sb() {
  sysbench oltp_read_write --db-driver=mysql --mysql-socket="$mysock" --mysql-user=root \
    --mysql-db=sbtest --tables="$tables" --table-size="$rows" --threads="$threads" "$@"
}

wait_socket() {
  for _ in $(seq 200); do
    nbdinfo --size "nbd+unix:///disk?socket=$sock" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "no NBD server on $sock" >&2
  return 1
}

# The prepared database, once.
if [ ! -f "$dir/base.img" ]; then
  echo "preparing $tables × $rows rows in $dir/base.img" >&2
  truncate -s "${image_mib}M" "$dir/base.img"
  loop=$(losetup -f --show --direct-io=on "$dir/base.img")
  mkfs.ext4 -q "$loop"
  mount "$loop" "$dir/mnt"
  mariadb-install-db --user=root --datadir="$dir/mnt/data" > "$dir/install.log" 2>&1
  start_db prepare
  mysql --socket="$mysock" -uroot -e "CREATE DATABASE sbtest"
  sb prepare > "$dir/prepare.log"
  cleanup
fi

run_target() { # name
  local name=$1
  cp --sparse=always "$dir/base.img" "$dir/store.img"
  case "$name" in
    plain)
      loop=$(losetup -f --show --direct-io=on "$dir/store.img") ;;
    strata-* | nbdkit-cache)
      rm -f "$sock" /dev/shm/strata-block-mariadb.pool
      local pool=()
      if [ "$name" = strata-wb-pool ]; then
        pool=(--cache /dev/shm/strata-block-mariadb.pool)
      fi
      if [ "$name" = nbdkit-cache ]; then
        nbdkit -f -U "$sock" -e disk --filter=cache file "$dir/store.img" &
      else
        local mode=${name#strata-}
        mode=${mode%-pool}
        "$strata" block --mode "$mode" --cache-size 1GiB "${pool[@]}" \
          --export "disk=$dir/store.img" --nbd-listen "unix:$sock" > "$dir/strata-$name.log" 2>&1 &
      fi
      server_pid=$!
      wait_socket
      nbdfuse "$dir/fuse/disk" "nbd+unix:///disk?socket=$sock" &
      fuse_pid=$!
      for _ in $(seq 100); do [ -e "$dir/fuse/disk" ] && break; sleep 0.05; done
      loop=$(losetup -f --show --direct-io=on "$dir/fuse/disk") ;;
  esac
  mount "$loop" "$dir/mnt"
  start_db "$name"
  sb run --time="$secs" --report-interval=0 > "$dir/run-$name.log"
  cleanup
  rm -f /dev/shm/strata-block-mariadb.pool
  local tps p95
  tps=$(awk '/transactions:/ {gsub(/\(/,"",$3); print $3}' "$dir/run-$name.log")
  p95=$(awk '/95th percentile:/ {print $3}' "$dir/run-$name.log")
  echo "| $name | $tps | $p95 |"
}

echo "| target | transactions/s | p95 latency ms |"
echo "|---|---:|---:|"
for target in ${TARGETS:-plain strata-wt strata-pt nbdkit-cache strata-wb strata-wb-pool}; do
  run_target "$target"
done
