#!/usr/bin/env python3
"""Issue 11's items-kept figure at a paced fill: SET N keys once each at a fixed rate (memcached
text protocol, pipelined in 10 ms batches), wait, then GET every key back (10-key multi-gets,
pipelined) and count the keys found with their own value.

The flat-out fill of `strata-bench compare` (bench/scenarios-flash) writes as fast as the server
takes SETs; this one writes at the rate the issue measured memcached's extstore at (1M items of
1 KiB at 32K/s, 256 MiB of memory and a 4 GiB flash file: extstore kept 34%).

    bench/fill-at-rate.py --port 11211 --keys 1000000 --value-bytes 1024 --rate 32000

Start the server first (pinned to another CPU than this script); see docs/BENCHMARKS.md.
"""

import argparse
import socket
import sys
import time


def value_of(key_index, value_bytes):
    stamp = b"v%d:" % key_index
    return (stamp * (value_bytes // len(stamp) + 1))[:value_bytes]


def recv_until(sock, buffer, marker):
    while marker not in buffer:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("server closed the connection")
        buffer += chunk
    return buffer


def fill(sock, keys, value_bytes, rate):
    batch = max(1, int(rate / 100))  # one batch every 10 ms
    started = time.monotonic()
    sent = 0
    pending = bytearray()
    while sent < keys:
        count = min(batch, keys - sent)
        request = bytearray()
        for i in range(sent, sent + count):
            request += b"set k%d 0 0 %d\r\n" % (i, value_bytes)
            request += value_of(i, value_bytes)
            request += b"\r\n"
        sock.sendall(request)
        sent += count
        # Read the replies of this batch (STORED, or an error, one line each).
        lines = 0
        while lines < count:
            pending = recv_until(sock, pending, b"\r\n")
            while b"\r\n" in pending and lines < count:
                line, _, rest = bytes(pending).partition(b"\r\n")
                pending = bytearray(rest)
                if line != b"STORED":
                    raise RuntimeError("SET answered %r" % line)
                lines += 1
        due = started + sent / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
    return time.monotonic() - started


def check(sock, keys, value_bytes, batch_keys=10, batches_in_flight=50):
    found = 0
    wrong = 0
    buffer = bytearray()
    next_key = 0
    while next_key < keys:
        request = bytearray()
        groups = []
        for _ in range(batches_in_flight):
            if next_key >= keys:
                break
            group = list(range(next_key, min(keys, next_key + batch_keys)))
            next_key += len(group)
            groups.append(group)
            request += b"get " + b" ".join(b"k%d" % i for i in group) + b"\r\n"
        sock.sendall(request)
        for _group in groups:
            while True:
                buffer = recv_until(sock, buffer, b"\r\n")
                line, _, rest = bytes(buffer).partition(b"\r\n")
                if line == b"END":
                    buffer = bytearray(rest)
                    break
                if not line.startswith(b"VALUE "):
                    raise RuntimeError("GET answered %r" % line)
                _, key, _flags, length = line.split(b" ")[:4]
                length = int(length)
                need = len(line) + 2 + length + 2
                while len(buffer) < need:
                    chunk = sock.recv(1 << 20)
                    if not chunk:
                        raise ConnectionError("server closed the connection")
                    buffer += chunk
                data = bytes(buffer[len(line) + 2:len(line) + 2 + length])
                buffer = bytearray(buffer[need:])
                if data == value_of(int(key[1:]), value_bytes):
                    found += 1
                else:
                    wrong += 1
    return found, wrong


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=11211)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--rate", type=float, default=32000.0, help="SETs per second")
    parser.add_argument("--settle-secs", type=float, default=5.0)
    args = parser.parse_args()
    sock = socket.create_connection((args.host, args.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    secs = fill(sock, args.keys, args.value_bytes, args.rate)
    time.sleep(args.settle_secs)
    found, wrong = check(sock, args.keys, args.value_bytes)
    print(
        "filled %d keys of %d B in %.1f s (%.0f SETs/s); kept %d (%.1f%%), wrong values %d"
        % (args.keys, args.value_bytes, secs, args.keys / secs, found,
           100.0 * found / args.keys, wrong)
    )
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
