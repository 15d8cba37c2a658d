#!/usr/bin/env python3
"""Many clients, one large value each: CLIENTS connections each SET a SIZE-byte value (the same
key) at once, then the server's RSS right after, and 2 s later. What a server keeps of the
buffers such requests grew shows here (strata: its read buffers, bounded by half of
--client-output-memory while they are held; the peers read into the value itself).

    bench/many-large.py PORT PID [CLIENTS] [SIZE]

Start the server first (bench/lib.sh's start_resp); redis-py is Debian's python3-redis.
"""
import sys
import threading
import time

import redis


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main():
    port, pid = int(sys.argv[1]), int(sys.argv[2])
    clients = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 4 << 20
    value = b"v" * size
    connections = [redis.Redis(port=port) for _ in range(clients)]
    for connection in connections:
        connection.ping()
    before = rss_mib(pid)
    start = threading.Barrier(clients)

    def send(connection):
        start.wait()
        assert connection.set("big", value)

    threads = [threading.Thread(target=send, args=(c,)) for c in connections]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = rss_mib(pid)
    time.sleep(2)
    later = rss_mib(pid)
    print(f"clients={clients} size={size} rss_mib before={before:.0f} after={after:.0f} "
          f"2s_later={later:.0f}")


if __name__ == "__main__":
    main()
