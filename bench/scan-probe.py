#!/usr/bin/env python3
"""How long SCAN calls take, and what they do to another connection's GETs (issue 11: SCAN
over a store mostly on flash reads flash records on the worker that runs it).

    bench/scan-probe.py RESP_PORT

Prints SCAN COUNT 10 and COUNT 100 call times (keys per call, median and max), then the
latency of a GET of a missing key sent every millisecond on a second connection for 5 s
alone and 5 s while the first connection runs SCAN COUNT 10 back to back. Fill the server
first (e.g. strata-bench run --preload). Pin it to a core of its own (taskset).
"""
import socket
import sys
import threading
import time


def connect(port):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock, sock.makefile("rb")


def command(*args):
    out = b"*%d\r\n" % len(args)
    for arg in args:
        arg = arg if isinstance(arg, bytes) else str(arg).encode()
        out += b"$%d\r\n%s\r\n" % (len(arg), arg)
    return out


def reply(reader):
    line = reader.readline()
    if line[:1] == b"*":
        return [reply(reader) for _ in range(int(line[1:]))]
    if line[:1] == b"$":
        n = int(line[1:])
        return None if n < 0 else reader.read(n + 2)[:-2]
    return line.strip()


def scan_calls(port, count, calls):
    sock, reader = connect(port)
    cursor, times, keys = b"0", [], 0
    for _ in range(calls):
        began = time.perf_counter()
        sock.sendall(command("SCAN", cursor, "COUNT", count))
        cursor, batch = reply(reader)
        times.append(time.perf_counter() - began)
        keys += len(batch)
        if cursor == b"0":
            break
    times.sort()
    print(f"SCAN COUNT {count}: {len(times)} calls, {keys / len(times):.0f} keys per call, "
          f"median {times[len(times) // 2] * 1e3:.2f} ms, max {times[-1] * 1e3:.2f} ms")


def get_latency(port, while_scanning):
    stop = threading.Event()

    def scanner():
        sock, reader = connect(port)
        cursor = b"0"
        while not stop.is_set():
            sock.sendall(command("SCAN", cursor, "COUNT", 10))
            cursor = reply(reader)[0]

    if while_scanning:
        threading.Thread(target=scanner, daemon=True).start()
        time.sleep(0.2)
    sock, reader = connect(port)
    times, end = [], time.time() + 5
    while time.time() < end:
        began = time.perf_counter()
        sock.sendall(command("GET", "missing-key"))
        reply(reader)
        times.append(time.perf_counter() - began)
        time.sleep(0.001)
    stop.set()
    times.sort()
    label = "while SCAN runs" if while_scanning else "alone"
    print(f"GET of a missing key, {label}: {len(times)} GETs, "
          f"p50 {times[len(times) // 2] * 1e6:.0f} us, p99 {times[int(len(times) * 0.99)] * 1e6:.0f} us, "
          f"max {times[-1] * 1e3:.1f} ms")


def main():
    port = int(sys.argv[1])
    scan_calls(port, 10, 200)
    scan_calls(port, 100, 100)
    get_latency(port, False)
    get_latency(port, True)


if __name__ == "__main__":
    main()
