"""redis-py against a strata server (port in argv[1]): hashes as applications use them.

Run by crates/strata/tests/hashes.rs; each check raises on a wrong answer. Field expiry
(Redis 7.4) goes through execute_command: Debian's redis-py 4.3 predates its helpers.
"""
import sys
import threading
import time

import redis

port = int(sys.argv[1])
r = redis.Redis(port=port)
r.flushall()

# A session store: a mapping in, the same mapping out, one field at a time too.
session = {"user": "ada", "cart": "3", "theme": "dark"}
assert r.hset("session:1", mapping=session) == 3
assert r.hgetall("session:1") == {k.encode(): v.encode() for k, v in session.items()}
assert r.hget("session:1", "user") == b"ada"
assert r.hmget("session:1", ["user", "nope", "theme"]) == [b"ada", None, b"dark"]
assert r.hincrby("session:1", "cart", 2) == 5
assert r.hincrbyfloat("session:1", "spent", 9.99) == 9.99
assert r.hexists("session:1", "theme") and not r.hexists("session:1", "nope")
assert r.hlen("session:1") == 4
assert sorted(r.hkeys("session:1")) == [b"cart", b"spent", b"theme", b"user"]
assert r.hsetnx("session:1", "user", "eve") == 0 and r.hget("session:1", "user") == b"ada"
assert r.hstrlen("session:1", "theme") == 4
assert r.hdel("session:1", "theme", "nope") == 1
assert r.type("session:1") == b"hash"
assert r.expire("session:1", 100) and 0 < r.ttl("session:1") <= 100
assert r.object("encoding", "session:1") == b"listpack"

# Strings and hashes do not mix: WRONGTYPE both ways, nothing changed.
r.set("plain", "v")
for call in (lambda: r.hset("plain", "f", "v"), lambda: r.get("session:1"),
             lambda: r.incr("session:1"), lambda: r.append("session:1", "x")):
    try:
        call()
        raise AssertionError("a command on the wrong type succeeded")
    except redis.exceptions.ResponseError as error:
        assert str(error).startswith("WRONGTYPE"), error
assert r.get("plain") == b"v" and r.hlen("session:1") == 3

# A larger hash: HSCAN walks it all, HRANDFIELD draws distinct fields.
big = {f"field:{i}": str(i) for i in range(1000)}
r.hset("big", mapping=big)
assert r.object("encoding", "big") == b"hashtable"
assert dict(r.hscan_iter("big")) == {k.encode(): v.encode() for k, v in big.items()}
assert len(dict(r.hscan_iter("big", match="field:99*"))) == 11
picked = r.hrandfield("big", 50)
assert len(picked) == 50 and len(set(picked)) == 50 and all(p in r.hkeys("big") for p in picked)
assert len(r.hrandfield("big", -2000)) == 2000
pairs = r.hrandfield("big", 5, withvalues=True)
assert len(pairs) == 10 and all(big[pairs[i].decode()] == pairs[i + 1].decode() for i in range(0, 10, 2))

# In a transaction and a pipeline.
pipe = r.pipeline()
pipe.hset("tx", "a", 1).hincrby("tx", "a", 1).hgetall("tx")
assert pipe.execute() == [1, 2, {b"a": b"2"}]

# Field expiry: set, read back, conditions, persist, and fields that go away.
r.hset("fe", mapping={"a": 1, "b": 2, "c": 3})
assert r.execute_command("HEXPIRE", "fe", 100, "FIELDS", 2, "a", "nope") == [1, -2]
assert r.execute_command("HEXPIRE", "fe", 100, "NX", "FIELDS", 2, "a", "b") == [0, 1]
assert r.execute_command("HEXPIRE", "fe", 50, "GT", "FIELDS", 1, "a") == [0]
ttl = r.execute_command("HTTL", "fe", "FIELDS", 3, "a", "c", "nope")
assert 0 < ttl[0] <= 100 and ttl[1:] == [-1, -2], ttl
assert r.execute_command("HPERSIST", "fe", "FIELDS", 2, "a", "c") == [1, -1]
assert r.execute_command("HPEXPIRE", "fe", 50, "FIELDS", 1, "c") == [1]
deadline = time.monotonic() + 10
while r.hget("fe", "c") is not None:
    assert time.monotonic() < deadline, "field c never expired"
    time.sleep(0.01)
assert r.hgetall("fe") == {b"a": b"1", b"b": b"2"} and r.hlen("fe") == 2
assert r.execute_command("HEXPIRE", "fe", 0, "FIELDS", 2, "a", "b") == [2, 2]
assert r.exists("fe") == 0, "the last field's removal deletes the key"
try:
    r.execute_command("HEXPIRE", "fe", 10, "FIELDS", 2, "a")
    raise AssertionError("a numfields that does not match was accepted")
except redis.exceptions.ResponseError as error:
    assert "numfields" in str(error), error

# The key goes with its last field, as in Redis; its own TTL is kept apart from the fields'.
def wait_gone(key):
    deadline = time.monotonic() + 10
    while r.exists(key):
        assert time.monotonic() < deadline, f"{key} outlived its last field"
        time.sleep(0.01)
    assert r.type(key) == b"none" and r.ttl(key) == -2

r.hset("gone", mapping={"a": 1, "b": 2})
assert r.execute_command("HPEXPIRE", "gone", 50, "FIELDS", 2, "a", "b") == [1, 1]
assert r.ttl("gone") == -1, "the key has no TTL of its own"
assert r.persist("gone") is False, "nothing to persist"
wait_gone("gone")
r.hset("later", "a", 1)
assert r.expire("later", 1000)
assert r.execute_command("HPEXPIRE", "later", 50, "FIELDS", 1, "a") == [1]
assert 990 <= r.ttl("later") <= 1000, r.ttl("later")
wait_gone("later")
r.hset("sooner", mapping={"a": 1, "b": 2})
assert r.execute_command("HEXPIRE", "sooner", 1000, "FIELDS", 2, "a", "b") == [1, 1]
assert r.pexpire("sooner", 50)
wait_gone("sooner")
r.hset("kept", "a", 1)
assert r.execute_command("HPEXPIRE", "kept", 50, "FIELDS", 1, "a") == [1]
r.hset("kept", "b", 2)
time.sleep(0.2)
assert r.hgetall("kept") == {b"b": b"2"} and r.ttl("kept") == -1, "a field without expiry keeps it"
assert r.execute_command("HPEXPIRE", "kept", 50, "FIELDS", 1, "b") == [1]
wait_gone("kept")

# SET KEEPTTL over a hash keeps the key's own TTL, not its last field's.
r.hset("kt", "a", 1)
assert r.expire("kt", 1000)
assert r.execute_command("HPEXPIRE", "kt", 50, "FIELDS", 1, "a") == [1]
assert r.set("kt", "v", keepttl=True)
time.sleep(0.2)
assert r.get("kt") == b"v" and 990 <= r.ttl("kt") <= 1000, r.ttl("kt")

# Concurrent HINCRBY on one field from eight threads: no increment is lost.
r.delete("counter")
def add(times):
    client = redis.Redis(port=port)
    for _ in range(times):
        client.hincrby("counter", "n", 1)
threads = [threading.Thread(target=add, args=(250,)) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
assert r.hget("counter", "n") == b"2000", r.hget("counter", "n")

print("all hashes checks passed")
