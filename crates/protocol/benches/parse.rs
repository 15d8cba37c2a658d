//! Parse throughput of the memcached text + meta protocol: a single-key `get`, a `set` with a
//! 100-byte value, a 100-key multiget and an `mg` with typical flags.
//!
//! Run with `cargo bench -p strata-protocol --bench parse`. Each iteration parses one request
//! from a buffer that holds exactly it; the reported time is per request.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use strata_protocol::memcache::{parse, Limits, Request};

fn multiget(keys_len: usize) -> Vec<u8> {
    let mut line = b"get".to_vec();
    for index in 0..keys_len {
        line.extend_from_slice(format!(" key:{index:08}").as_bytes());
    }
    line.extend_from_slice(b"\r\n");
    line
}

fn set(value_len: usize) -> Vec<u8> {
    let mut request = format!("set key:00000001 0 0 {value_len}\r\n").into_bytes();
    request.resize(request.len() + value_len, b'v');
    request.extend_from_slice(b"\r\n");
    request
}

fn bench_parse(c: &mut Criterion) {
    let limits = Limits::default();
    let cases: [(&str, Vec<u8>); 4] = [
        ("get", b"get key:00000001\r\n".to_vec()),
        ("set_100b", set(100)),
        ("get_100_keys", multiget(100)),
        ("mg", b"mg key:00000001 v f t c k Oabcd\r\n".to_vec()),
    ];
    let mut group = c.benchmark_group("memcache_parse");
    for (name, input) in &cases {
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.bench_function(*name, |b| {
            b.iter(|| {
                let parsed = parse(black_box(input), &limits).expect("benchmark input parses");
                // Walk multiget keys so the lazy key iterator is timed too.
                if let Request::Get(get) = parsed.request {
                    black_box(get.keys.iter().count());
                }
                black_box(parsed.consumed)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench_parse);
criterion_main!(benches);
