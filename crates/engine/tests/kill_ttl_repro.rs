use strata_engine::*;

fn config(path: &std::path::Path) -> EngineConfig {
    EngineConfig {
        memory_bytes: 64 << 20,
        segment_size_bytes: 256 << 10,
        pool: PoolLocation::File(path.to_path_buf()),
        ..EngineConfig::default()
    }
}

#[test]
fn repro() {
    let path = std::path::PathBuf::from(format!("/dev/shm/repro-{}.pool", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let n = 3000u32;
    let mut model: Vec<Option<Vec<u8>>> = vec![None; n as usize];
    let mut x = 12345u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..6 {
        let engine = Engine::open(config(&path)).unwrap();
        engine.check_integrity().unwrap();
        for i in 0..n {
            let got = engine.get(format!("k{i}").as_bytes(), |it| it.value.to_vec());
            assert_eq!(got, model[i as usize], "round {round} k{i} after open");
        }
        for _ in 0..5000 {
            let i = (rnd() % n as u64) as u32;
            let v = format!("v{i}-{}", rnd() % 1000).into_bytes();
            let expiry = if rnd() % 10 < 3 {
                Expiry::AtMs(engine.now_ms() + 3_600_000 + rnd() % 2_000_000_000)
            } else {
                Expiry::Never
            };
            engine
                .set(format!("k{i}").as_bytes(), &v, 0, expiry)
                .unwrap();
            model[i as usize] = Some(v);
        }
        engine.expire().unwrap();
        for i in 0..n {
            let got = engine.get(format!("k{i}").as_bytes(), |it| it.value.to_vec());
            assert_eq!(got, model[i as usize], "round {round} k{i} after writes");
        }
        engine.check_integrity().unwrap();
        // crash
    }
    let _ = std::fs::remove_file(&path);
}
