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
