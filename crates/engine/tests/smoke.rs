use strata_engine::*;

#[test]
fn smoke() {
    let engine = Engine::open(EngineConfig {
        memory_bytes: 8 << 20,
        segment_size_bytes: 64 << 10,
        ..Default::default()
    })
    .unwrap();
    let cas = engine.set(b"k", b"v", 5, Expiry::Never).unwrap();
    assert_eq!(
        engine.get(b"k", |i| (i.value.to_vec(), i.client_flags, i.cas)),
        Some((b"v".to_vec(), 5, cas))
    );
    for i in 0..200_000u32 {
        engine
            .set(
                format!("key:{i:012}").as_bytes(),
                &[7u8; 32],
                0,
                Expiry::Never,
            )
            .unwrap();
    }
    let s = engine.stats();
    eprintln!("{s:?}");
    engine.check_integrity().unwrap();
    assert!(s.evicted_items > 0);
    assert_eq!(engine.get(b"key:000000199999", |i| i.value.len()), Some(32));
}
