# Shared by the bench scripts: `source "$(dirname "$0")/lib.sh"`.

# wait_port PORT: waits up to 10 s for a listener on 127.0.0.1:PORT.
wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "server on port $1 did not start" >&2
  return 1
}

# cpu_ticks PID: the process's user + system CPU time so far, in clock ticks (100 a second).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# start_resp SERVER MEMORY: starts strata (one worker, MEMORY), valkey or redis (no snapshots)
# on CPU 0 listening on $port, sets $pid, and waits until it answers PING (fails after 5 s).
# Reads $strata and $valkey, the binaries, and $STRATA_ARGS, more flags for strata.
start_resp() {
  case $1 in
    strata) taskset -c 0 "$strata" serve --threads 1 --memory "$2" --log-level warn \
      --resp-listen 127.0.0.1:$port --memcache-listen off --admin-listen off \
      ${STRATA_ARGS:-} >/dev/null 2>&1 & ;;
    valkey) taskset -c 0 "$valkey" --port $port --save '' --appendonly no >/dev/null 2>&1 & ;;
    redis) taskset -c 0 redis-server --port $port --save '' --appendonly no >/dev/null 2>&1 & ;;
  esac
  pid=$!
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  return 1
}

# fill_user_hashes PORT [STRINGS]: writes 10,000 hashes of 10 fields with redis-py, `user:1` ..
# `user:10000` (8-byte names `field000`.., 20-byte values), which memtier's keys then name
# (`--key-prefix=user: --key-minimum=1 --key-maximum=10000`); with STRINGS=1 also 10,000
# strings of 20 bytes, `str:1` .. `str:10000`.
fill_user_hashes() {
  /usr/bin/python3 - "$1" "${2:-0}" <<'PY'
import redis, sys
r = redis.Redis(port=int(sys.argv[1]))
strings = sys.argv[2] == "1"
p = r.pipeline(transaction=False)
for i in range(1, 10001):
    p.hset(f"user:{i}", mapping={f"field{j:03d}": f"value-{i:08d}-{j:05d}" for j in range(10)})
    if strings:
        p.set(f"str:{i}", f"value-{i:08d}-00000")
    if i % 500 == 0:
        p.execute()
p.execute()
PY
}
