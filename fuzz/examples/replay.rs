//! Runs one target's check on files, as the fuzzer would, and says which fail:
//! `cargo run --manifest-path fuzz/Cargo.toml --example replay -- <target> FILE...`.
fn main() {
    let mut args = std::env::args().skip(1);
    let target = args.next().expect("a target name");
    let check: fn(&[u8]) = match target.as_str() {
        "memcache_parse" => strata_fuzz::memcache::check,
        "resp_parse" => strata_fuzz::resp::check,
        "pool_open" => |data| println!("{:?}", strata_fuzz::pool::run(data)),
        "flash_verify" => strata_fuzz::flash::check,
        other => panic!("no target {other}"),
    };
    let mut failed = 0;
    for path in args {
        let data = std::fs::read(&path).expect("read an input");
        if std::panic::catch_unwind(|| check(&data)).is_err() {
            println!("{path}: FAILS");
            failed += 1;
        }
    }
    strata_fuzz::pool::remove_scratch_dir();
    std::process::exit(i32::from(failed > 0));
}
