"""CLIENT LIST with 5,000 connections (issue 32): time from the request to the last byte of the
reply, median of 7, strata vs Valkey vs Redis, each server on CPU 0.

    taskset -c 1 python3 bench/client-list.py STRATA_BINARY VALKEY_BINARY
"""
import socket, subprocess, sys, time, statistics
def run(name, cmd, port):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close(); break
        except OSError: time.sleep(0.05)
    conns = []
    for i in range(5000):
        s = socket.create_connection(("127.0.0.1", port)); conns.append(s)
    c = socket.create_connection(("127.0.0.1", port))
    times = []
    for _ in range(7):
        t = time.monotonic(); c.sendall(b"CLIENT LIST\r\n")
        buf = b""
        # bulk reply: $len\r\n...\r\n
        while b"\r\n" not in buf: buf += c.recv(1 << 20)
        n = int(buf[1:buf.index(b"\r\n")]); need = buf.index(b"\r\n") + 2 + n + 2
        while len(buf) < need: buf += c.recv(1 << 20)
        times.append((time.monotonic() - t) * 1000)
        lines = buf.count(b"\n") - 1
    print(f"{name}: CLIENT LIST with {lines} connections: median {statistics.median(times):.2f} ms (min {min(times):.2f})")
    for s in conns: s.close()
    p.terminate(); p.wait()
run("strata", ["taskset","-c","0",sys.argv[1],"serve","--threads","1","--max-connections","6000","--resp-listen","127.0.0.1:24001","--memcache-listen","off","--admin-listen","off"], 24001)
run("valkey", ["taskset","-c","0",sys.argv[2],"--port","24002","--save","","--appendonly","no","--maxclients","6000"], 24002)
run("redis", ["taskset","-c","0","redis-server","--port","24003","--save","","--appendonly","no","--maxclients","6000"], 24003)
