"""Large hashes (kept in chunks past 8 KiB) through redis-py, against a dict model: random
HSET/HMSET/HDEL/HINCRBY/HGET/HMGET/HEXISTS/HSTRLEN/HLEN on two hashes that grow through many
splits, then HGETALL, HKEYS, HVALS, a whole HSCAN walk, HRANDFIELD, EXPIRE/TTL, MULTI/EXEC
and WATCH on a large hash, field expiry, RENAME and COPY (inside a MULTI that runs alone too), and HDEL of every field removing
the key."""
import random
import sys

import redis

r = redis.Redis(port=int(sys.argv[1]))
r.flushall()
rng = random.Random(7)
model = {"big0": {}, "big1": {}}


def check(what, got, want):
    assert got == want, f"{what}: got {got!r}, want {want!r}"


for step in range(20000):
    key = f"big{rng.randrange(2)}"
    hash_ = model[key]
    field = f"field:{rng.randrange(4000)}"
    op = rng.randrange(10)
    if op < 4:
        value = "v" * rng.randrange(1, 50)
        check(f"{step} hset", r.hset(key, field, value), int(field not in hash_))
        hash_[field] = value
    elif op == 4:
        pairs = {f"field:{rng.randrange(4000)}": str(rng.randrange(100)) for _ in range(5)}
        added = sum(1 for f in pairs if f not in hash_)
        check(f"{step} hset many", r.hset(key, mapping=pairs), added)
        hash_.update(pairs)
    elif op == 5:
        names = [field, f"field:{rng.randrange(4000)}"]
        removed = len({n for n in names if n in hash_})
        check(f"{step} hdel", r.hdel(key, *names), removed)
        for n in names:
            hash_.pop(n, None)
    elif op == 6:
        counter = f"n{rng.randrange(5)}"
        new = int(hash_.get(counter, "0")) + 3
        check(f"{step} hincrby", r.hincrby(key, counter, 3), new)
        hash_[counter] = str(new)
    elif op == 7:
        want = hash_.get(field)
        check(f"{step} hget", r.hget(key, field), want and want.encode())
        names = [field, "field:1", "field:2"]
        check(f"{step} hmget", r.hmget(key, names), [hash_.get(n) and hash_[n].encode() for n in names])
    elif op == 8:
        check(f"{step} hexists", r.hexists(key, field), field in hash_)
        check(f"{step} hstrlen", r.hstrlen(key, field), len(hash_.get(field, "")))
    else:
        check(f"{step} hlen", r.hlen(key), len(hash_))

for key, hash_ in model.items():
    want = {k.encode(): v.encode() for k, v in hash_.items()}
    assert len(want) > 1000, "the hashes must be large"
    check("hgetall", r.hgetall(key), want)
    check("hkeys", sorted(r.hkeys(key)), sorted(want))
    check("hvals", sorted(r.hvals(key)), sorted(want.values()))
    seen, cursor, calls = {}, 0, 0
    while True:
        cursor, found = r.hscan(key, cursor, count=100)
        seen.update(found)
        calls += 1
        if cursor == 0:
            break
    check("hscan", seen, want)
    assert calls > 1, "a large hash's HSCAN pages"
    picked = r.hrandfield(key, 50)
    assert len(picked) == 50 and len(set(picked)) == 50 and set(picked) <= set(want)
    picked = r.hrandfield(key, -20, withvalues=True)
    assert len(picked) == 40
    assert r.hrandfield(key) in want
    payload = sum(len(k) + len(v) for k, v in want.items())
    usage = r.memory_usage(key)
    assert payload < usage < 3 * payload, f"MEMORY USAGE {usage} for {payload} bytes of fields"
    check("type", r.type(key), b"hash")
    check("encoding", r.object("encoding", key), b"hashtable")
    assert r.expire(key, 1000) and 990 <= r.ttl(key) <= 1000
    assert r.persist(key) and r.ttl(key) == -1
    check("hlen after expire", r.hlen(key), len(want))

# MULTI/EXEC and WATCH on a large hash.
with r.pipeline() as pipe:
    pipe.hset("big0", "in-exec", "1")
    pipe.hincrby("big0", "in-exec", 4)
    check("exec", pipe.execute(), [1, 5])
model["big0"]["in-exec"] = "5"
watcher = r.pipeline()
watcher.watch("big0")
r.hset("big0", "field:1", "changed by another client")
model["big0"]["field:1"] = "changed by another client"
watcher.multi()
watcher.hset("big0", "never", "1")
try:
    watcher.execute()
    raise AssertionError("WATCH missed a write to a chunk of a large hash")
except redis.WatchError:
    pass
check("never", r.hexists("big0", "never"), False)

# Field expiry on a large hash.
check("hexpire", r.execute_command("HEXPIRE", "big0", 100, "FIELDS", 2, "field:1", "nope"), [1, -2])
ttl = r.execute_command("HTTL", "big0", "FIELDS", 1, "field:1")
assert 90 <= ttl[0] <= 100, ttl
check("hpersist", r.execute_command("HPERSIST", "big0", "FIELDS", 1, "field:1"), [1])

# RENAME and COPY move every chunk (the keys' shards held together), to keys on other
# shards too; COPY without REPLACE leaves an existing key alone.
want0 = {k.encode(): v.encode() for k, v in model["big0"].items()}
for i in range(8):
    check("copy", r.copy("big0", f"copy{i}"), True)
    check("copied", r.hgetall(f"copy{i}"), want0)
check("copy onto a key", r.copy("big0", "copy0"), False)
r.hset("copy1", "only-in-copy", "1")
check("the copy is its own", r.hexists("big0", "only-in-copy"), False)
check("rename", r.rename("big0", "renamed"), True)
check("renamed", (r.exists("big0"), r.hgetall("renamed")), (0, want0))
check("rename back", r.rename("renamed", "big0"), True)
r.set("copy2", "a string")
check("copy replace", r.copy("big0", "copy2", replace=True), True)
check("replaced", r.hgetall("copy2"), want0)
r.hset("copy3", "x", "y")
check("renamenx onto a key", r.renamenx("copy4", "copy3"), False)
check("still there", r.hlen("big0"), len(model["big0"]))
# Inside a MULTI that also runs a command on the whole keyspace (its EXEC runs alone), COPY
# and RENAME move every chunk too (run again with their keys held).
pipe = r.pipeline(transaction=True)
pipe.dbsize()
pipe.copy("big0", "alone")
pipe.rename("alone", "alone-renamed")
pipe.hlen("alone-renamed")
check("alone", pipe.execute()[1:], [True, True, len(model["big0"])])
check("alone copied", r.hgetall("alone-renamed"), want0)
r.delete("alone-renamed")

pipe = r.pipeline(transaction=False)
for field in model["big1"]:
    pipe.hdel("big1", field)
pipe.execute()
check("emptied", (r.exists("big1"), r.hlen("big1")), (0, 0))
# A connection that met a large hash sends its next hash commands on that key straight to
# the chunks (a hint): when another client has since made the key a string, a small hash or
# nothing, they still answer as Redis does.
hinted = redis.Redis(port=int(sys.argv[1]), single_connection_client=True)
other = redis.Redis(port=int(sys.argv[1]))
hinted.hset("hinted", mapping={f"f{i:05d}": "x" * 40 for i in range(600)})
check("hinted large", hinted.hlen("hinted"), 600)
other.delete("hinted")
other.set("hinted", "a string")
try:
    hinted.hget("hinted", "f00001")
    raise AssertionError("a string answered HGET")
except redis.ResponseError as error:
    assert str(error).startswith("WRONGTYPE"), error
check("the string kept", other.get("hinted"), b"a string")
other.delete("hinted")
check("hinted gone", (hinted.hget("hinted", "f00001"), hinted.hlen("hinted")), (None, 0))
other.hset("hinted", "small", "1")
check("hinted small", (hinted.hset("hinted", "b", "2"), hinted.hgetall("hinted")), (1, {b"small": b"1", b"b": b"2"}))
check("hinted incr", hinted.hincrby("hinted", "small", 4), 5)
other.delete("hinted")

# A large hash whose fields all expire goes with them, before its own TTL, as in Redis
# (EXISTS, DBSIZE and TTL see it gone); one field without an expiry keeps it; so does a
# field persisted; a field given an expiry again makes it go again.
import time

names = [f"f{i:05d}" for i in range(600)]
fields = {name: "x" * 40 for name in names}
for key in ("goes", "stays", "persisted", "keeps-key-ttl"):
    r.hset(key, mapping=fields)
r.expire("goes", 1000)
r.expire("keeps-key-ttl", 1)
before = r.dbsize()
for key in ("goes", "stays", "persisted", "keeps-key-ttl"):
    expiring = names if key != "stays" else names[1:]
    ms = 5000 if key == "keeps-key-ttl" else 400
    check(f"hpexpire {key}", r.execute_command("HPEXPIRE", key, ms, "FIELDS", len(expiring), *expiring), [1] * len(expiring))
check("hpersist one", r.execute_command("HPERSIST", "persisted", "FIELDS", 1, names[7]), [1])
check("all there", [r.exists(k) for k in ("goes", "stays", "persisted", "keeps-key-ttl")], [1, 1, 1, 1])
check("own ttl kept", 990 <= r.ttl("goes") <= 1000, True)
time.sleep(1.3)
check("gone with its fields", (r.exists("goes"), r.ttl("goes"), r.hlen("goes")), (0, -2, 0))
check("the key's own TTL first", r.exists("keeps-key-ttl"), 0)
check("one field without expiry keeps it", (r.exists("stays"), r.hgetall("stays")), (1, {names[0].encode(): b"x" * 40}))
check("a persisted field keeps it", (r.exists("persisted"), r.hkeys("persisted")), (1, [names[7].encode()]))
check("dbsize", r.dbsize(), before - 2)
check("keys", sorted(k for k in r.keys("*") if k in (b"goes", b"stays", b"persisted", b"keeps-key-ttl")), [b"persisted", b"stays"])
r.hset("persisted", mapping={name: "y" for name in names[:300]})
check("hpexpire again", r.execute_command("HPEXPIRE", "persisted", 300, "FIELDS", 300, *names[:300]), [1] * 300)
time.sleep(0.8)
check("gone again", r.exists("persisted"), 0)

print("all large hashes checks passed")
