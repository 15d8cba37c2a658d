# One hash of N fields (16-byte names, 32-byte values) loaded with pipelined HSETs: load time,
# RSS growth per field, HLEN time.  bench/hash-million.py PORT N SERVER_PID LABEL
import redis, sys, time
r = redis.Redis(port=int(sys.argv[1])); n = int(sys.argv[2])
pid = int(sys.argv[3])
def rss(): return int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1])
base = rss(); t = time.time()
p = r.pipeline(transaction=False)
for i in range(n):
    p.hset("big", "field:%010d" % i, "v" * 32)   # 16-byte names, 32-byte values
    if i % 2000 == 1999: p.execute()
p.execute()
el = time.time() - t
assert r.hlen("big") == n
t = time.time(); r.hlen("big"); hl = time.time() - t
print(f"{sys.argv[4]} fields={n} load_s={el:.1f} rss_growth_B_per_field={(rss()-base)*1024/n:.1f} hlen_ms={hl*1000:.2f}")
