#!/bin/sh
# Runs a command with the disk holding PATH limited to IOPS reads and IOPS writes a second (the
# block I/O cgroup's throttle), a stand-in for a disk slower than this VM's, whose O_DIRECT
# writes run about as fast as an NBD round trip on two cores (so a cache in front cannot show
# what it saves). Everything the command starts inherits the limit: fio's direct runs, nbdkit
# and strata's writes to the backing file alike; NBD traffic over a Unix socket is not disk
# I/O and is not limited.
#
# Usage: bench/slow-disk-cgroup.sh IOPS PATH COMMAND [ARGS...]   (as root)
#   bench/slow-disk-cgroup.sh 2000 /work/disk bench/block-write.sh /work/disk 1024 10
# Uses cgroup v2's io.max where mounted at /sys/fs/cgroup, else v1's blkio throttle.
set -eu
if [ "$#" -lt 3 ]; then
    echo "usage: $0 IOPS PATH COMMAND [ARGS...]" >&2
    exit 2
fi
iops=$1
path=$2
shift 2
# The whole disk's major:minor (a partition's parent, if the file system is on one).
dev=$(stat -c '%d' "$path")
major=$((dev >> 8))
minor=$((dev & 255))
parent=$(basename "$(readlink -f "/sys/dev/block/$major:$minor/..")")
if [ -e "/sys/block/$parent/dev" ]; then
    read -r majmin <"/sys/block/$parent/dev"
else
    majmin="$major:$minor"
fi
name="strata-slow-disk-$$"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    root=/sys/fs/cgroup
    grep -qw io "$root/cgroup.subtree_control" || echo +io >"$root/cgroup.subtree_control"
    mkdir "$root/$name"
    echo "$majmin riops=$iops wiops=$iops" >"$root/$name/io.max"
elif [ -d /sys/fs/cgroup/blkio ]; then
    root=/sys/fs/cgroup/blkio
    mkdir "$root/$name"
    echo "$majmin $iops" >"$root/$name/blkio.throttle.read_iops_device"
    echo "$majmin $iops" >"$root/$name/blkio.throttle.write_iops_device"
else
    echo "$0: no io or blkio cgroup controller under /sys/fs/cgroup" >&2
    exit 1
fi
for stale in "$root"/strata-slow-disk-*; do
    [ "$stale" != "$root/$name" ] && [ -d "$stale" ] && rmdir "$stale" 2>/dev/null || true
done
echo $$ >"$root/$name/cgroup.procs"
exec "$@"
