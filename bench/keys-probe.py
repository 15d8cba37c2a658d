#!/usr/bin/env python3
"""How long `KEYS *` takes over a store mostly on flash, and what it does to another
connection's GETs meanwhile (issue 11: KEYS learns each flash key by reading its record).

    bench/keys-probe.py MEMCACHE_PORT RESP_PORT KEYS [fill]

With `fill`, first writes KEYS keys `k0`.. of 1,000 bytes through the memcache port (pipelined
noreply sets, then `mn`). Then a second connection GETs the newest key every millisecond
while the first sends `KEYS *` and reads the whole reply; prints the KEYS time and the GETs'
median and worst latency during it. Run the server with one worker (`--threads 1`, so both
connections share it) pinned to a core of its own, and this probe on another.
"""
import socket
import sys
import threading
import time

VALUE = b"x" * 1000


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_until(sock, end):
    data = b""
    while not data.endswith(end):
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("the server closed the connection")
        data += chunk
    return data


def fill(port, keys):
    sock = connect(port)
    started = time.time()
    batch = []
    for i in range(keys):
        batch.append(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(VALUE), VALUE))
        if len(batch) == 500:
            sock.sendall(b"".join(batch))
            batch = []
    sock.sendall(b"".join(batch) + b"mn\r\n")
    read_until(sock, b"MN\r\n")
    print(f"filled {keys} keys in {time.time() - started:.1f} s")


def print_stats(port):
    sock = connect(port)
    sock.sendall(b"stats\r\n")
    for line in read_until(sock, b"END\r\n").decode().split("\r\n"):
        if line.startswith(("STAT curr_items ", "STAT strata_flash_items ")):
            print(line)


def read_keys_reply(sock):
    """Reads a RESP array of bulks; returns how many elements it held."""
    data = b""
    while b"\r\n" not in data:
        data += sock.recv(1 << 20)
    count = int(data[1 : data.index(b"\r\n")])
    at, got = data.index(b"\r\n") + 2, 0
    while got < count:
        end = data.find(b"\r\n", at)
        if end >= 0:
            length = int(data[at + 1 : end])
            if len(data) >= end + 2 + length + 2:
                at, got = end + 2 + length + 2, got + 1
                continue
        data += sock.recv(1 << 20)
    return count


def main():
    memcache_port, resp_port, keys = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    if len(sys.argv) > 4 and sys.argv[4] == "fill":
        fill(memcache_port, keys)
    print_stats(memcache_port)
    latencies, stop = [], threading.Event()

    def probe():
        sock = connect(memcache_port)
        request = b"get k%d\r\n" % (keys - 1)
        while not stop.is_set():
            started = time.perf_counter()
            sock.sendall(request)
            read_until(sock, b"END\r\n")
            latencies.append(time.perf_counter() - started)
            time.sleep(0.001)

    prober = threading.Thread(target=probe)
    prober.start()
    time.sleep(0.5)
    before = len(latencies)
    sock = connect(resp_port)
    started = time.time()
    sock.sendall(b"*2\r\n$4\r\nKEYS\r\n$1\r\n*\r\n")
    count = read_keys_reply(sock)
    elapsed = time.time() - started
    stop.set()
    prober.join()
    during = sorted(latencies[before:]) or [0.0]
    print(
        f"KEYS *: {count} keys in {elapsed:.2f} s; the other connection's GETs meanwhile: "
        f"{len(during)}, p50 {during[len(during) // 2] * 1e3:.2f} ms, "
        f"worst {during[-1] * 1e3:.1f} ms"
    )


if __name__ == "__main__":
    main()
