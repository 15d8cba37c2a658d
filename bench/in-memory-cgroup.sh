#!/bin/sh
# Runs a command confined to a memory limit that counts the page cache too, so that a server
# whose flash tier goes through the page cache (memcached's extstore opens its file without
# O_DIRECT) holds no more DRAM than one that reads the disk directly (strata's flash tier).
# The issue-11 comparison asks for the same DRAM budget; without this, extstore's "flash" reads
# come from gigabytes of page cache.
#
# Usage: bench/in-memory-cgroup.sh LIMIT_MIB COMMAND [ARGS...]   (as root; docs/BENCHMARKS.md)
# In a server command template, e.g.:
#   --memcached-cmd "bench/in-memory-cgroup.sh 384 memcached -u nobody -t {threads} ..."
# The command is exec'd, so it keeps this script's process id (the bench samples its CPU).
# Uses cgroup v2 (memory.max, swap off) where mounted at /sys/fs/cgroup, else v1's memory
# controller; empty groups left by earlier runs are removed first.
set -eu
if [ "$#" -lt 2 ]; then
    echo "usage: $0 LIMIT_MIB COMMAND [ARGS...]" >&2
    exit 2
fi
limit_bytes=$(($1 * 1024 * 1024))
shift
name="strata-bench-$$"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    root=/sys/fs/cgroup
    grep -qw memory "$root/cgroup.subtree_control" || echo +memory >"$root/cgroup.subtree_control"
    limit_file=memory.max
elif [ -d /sys/fs/cgroup/memory ]; then
    root=/sys/fs/cgroup/memory
    limit_file=memory.limit_in_bytes
else
    echo "$0: no memory cgroup controller under /sys/fs/cgroup" >&2
    exit 1
fi
for stale in "$root"/strata-bench-*; do
    [ -d "$stale" ] && rmdir "$stale" 2>/dev/null || true
done
mkdir "$root/$name"
echo "$limit_bytes" >"$root/$name/$limit_file"
if [ -f "$root/$name/memory.swap.max" ]; then
    echo 0 >"$root/$name/memory.swap.max"
fi
echo $$ >"$root/$name/cgroup.procs"
exec "$@"
