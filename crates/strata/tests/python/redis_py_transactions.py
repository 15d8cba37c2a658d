"""redis-py against a strata server (port in argv[1]): transactions as applications use them.

Run by crates/strata/tests/transactions.rs; each check raises on a wrong answer.
"""
import sys
import threading

import redis

port = int(sys.argv[1])
r = redis.Redis(port=port)
r.flushall()

# The default pipeline wraps its commands in MULTI/EXEC: all replies, in order.
pipe = r.pipeline()
pipe.set("a", 1).incr("a").incr("a").get("a")
assert pipe.execute() == [True, 2, 3, b"3"], "pipeline"

# A queue-time error (a wrong arity) aborts the whole transaction: nothing is applied.
pipe = r.pipeline()
pipe.incr("a")
pipe.execute_command("GET")
try:
    pipe.execute()
    raise AssertionError("EXEC of a transaction with a queue-time error succeeded")
except redis.exceptions.ResponseError as error:
    assert "EXECABORT" in str(error) or "wrong number" in str(error), error
assert r.get("a") == b"3", "nothing of the aborted transaction was applied"

# A runtime error is that command's alone: the others run.
pipe = r.pipeline()
pipe.set("s", "text").incr("s").set("t", "after")
results = pipe.execute(raise_on_error=False)
assert results[0] is True and isinstance(results[1], redis.exceptions.ResponseError)
assert r.get("t") == b"after"


# The transaction() helper: WATCH, read, MULTI, write, EXEC, retried on a conflict.
def add_ten(p):
    value = int(p.get("a") or 0)
    p.multi()
    p.set("a", value + 10)


r.transaction(add_ten, "a")
assert r.get("a") == b"13", "transaction helper"

# A watched key changed by another client aborts EXEC (WatchError), and nothing runs.
p = r.pipeline()
p.watch("a")
redis.Redis(port=port).set("a", 100)
p.multi()
p.set("a", 0)
try:
    p.execute()
    raise AssertionError("EXEC ran though a watched key changed")
except redis.WatchError:
    pass
assert r.get("a") == b"100"

# WATCH retry loops on eight threads: no update is lost.
r.set("counter", 0)
done = [0] * 8


def incrementer(slot):
    client = redis.Redis(port=port)
    for _ in range(150):
        while True:
            with client.pipeline() as p:
                try:
                    p.watch("counter")
                    value = int(p.get("counter"))
                    p.multi()
                    p.set("counter", value + 1)
                    p.execute()
                    done[slot] += 1
                    break
                except redis.WatchError:
                    continue


threads = [threading.Thread(target=incrementer, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert int(r.get("counter")) == sum(done) == 8 * 150, (r.get("counter"), sum(done))
print("all transactions checks passed")
