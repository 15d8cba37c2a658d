#!/usr/bin/env python3
"""Fixed-count pipelined load for scripts/perf/instr-per-request.sh: CONNS connections, each
sends batches of PIPE requests (90% GET / 10% SET, 64-byte values, 16-byte keys over KEYS keys,
seeded) and waits for all their replies before its next batch.
Usage: fixedload.py PORT PROTO(mc|resp) TOTAL [preload]"""
import random, socket, sys, selectors
port, proto, total = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
preload = len(sys.argv) > 4
CONNS, PIPE, KEYS = 20, 16, 100000
rng = random.Random(1)
val = b"v" * 64
def key(i): return b"key:%012d" % i
def req(get, k):
    if proto == "mc":
        return b"get %s\r\n" % k if get else b"set %s 0 0 64\r\n%s\r\n" % (k, val)
    if get: return b"*2\r\n$3\r\nGET\r\n$16\r\n%s\r\n" % k
    return b"*3\r\n$3\r\nSET\r\n$16\r\n%s\r\n$64\r\n%s\r\n" % (k, val)
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(CONNS)]
for s in socks: s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
if preload:
    ks = list(range(KEYS))
    for start in range(0, KEYS, 1000):
        s = socks[0]
        s.sendall(b"".join(req(False, key(i)) for i in ks[start:start+1000]))
        need = 1000; buf = b""
        term = b"STORED\r\n" if proto == "mc" else b"+OK\r\n"
        while buf.count(term) < need: buf += s.recv(1 << 20)
    sys.exit(0)
# precompute batches
batches = []
for _ in range(total // PIPE):
    gets = [rng.random() < 0.9 for _ in range(PIPE)]
    ks = [key(rng.randrange(KEYS)) for _ in range(PIPE)]
    batches.append((b"".join(req(g, k) for g, k in zip(gets, ks)), sum(gets), PIPE - sum(gets)))
def complete(buf, gets, sets):
    if proto == "mc":
        return buf.count(b"END\r\n") >= gets and buf.count(b"STORED\r\n") >= sets
    # RESP: each GET reply is $64\r\n...\r\n or $-1\r\n; SET +OK\r\n
    return buf.count(b"+OK\r\n") >= sets and (buf.count(b"$64\r\n") + buf.count(b"$-1\r\n")) >= gets
sel = selectors.DefaultSelector()
state = {}
it = iter(batches)
for s in socks:
    b = next(it, None)
    if b is None: break
    s.sendall(b[0]); state[s] = [b, b""]; sel.register(s, selectors.EVENT_READ)
while state:
    for k, _ in sel.select():
        s = k.fileobj
        st = state[s]
        st[1] += s.recv(1 << 16)
        if complete(st[1], st[0][1], st[0][2]):
            b = next(it, None)
            if b is None:
                sel.unregister(s); del state[s]; continue
            s.sendall(b[0]); st[0] = b; st[1] = b""
