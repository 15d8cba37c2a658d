//! `strata pool inspect|verify` on a pool the real server wrote and closed.

mod harness;

use harness::{run_output, Client, PoolFile, Server};

#[test]
fn inspect_and_verify_a_cleanly_closed_pool() {
    let pool_file = PoolFile::new("inspect");
    let pool = pool_file.path();
    {
        let flags = ["--pool", pool, "--fresh", "--segment-size", "1MiB"];
        let mut server = Server::start(&[&flags[..], &["--max-value-size", "512KiB"]].concat());
        let mut client = Client::connect(server.resp);
        assert_eq!(client.call(b"SET k v\r\n"), "+OK\r\n");
        server.terminate();
    }
    let (status, stdout, stderr) = run_output(&["pool", "inspect", pool]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("closed cleanly:  true"), "{stdout}");
    assert!(
        stdout.contains("segment size:    1048576 bytes"),
        "{stdout}"
    );

    let (status, stdout, stderr) = run_output(&["pool", "verify", pool]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("items: 1 "), "{stdout}");
    assert!(stdout.trim_end().ends_with("ok"), "{stdout}");

    // Damage one byte of the in-use segment's header line: verify must say so and exit 1,
    // without touching the file.
    let mut bytes = std::fs::read(pool).expect("read pool");
    let segment_table = 4096;
    let line = (0..bytes.len() / 64)
        .map(|i| segment_table + i * 64)
        .find(|&at| bytes[at] == 1)
        .expect("an in-use segment header");
    bytes[line + 20] ^= 0x40;
    std::fs::write(pool, &bytes).expect("write pool");
    let (status, stdout, _) = run_output(&["pool", "verify", pool]);
    assert_eq!(status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("header fails its checksum"), "{stdout}");
    assert_eq!(
        std::fs::read(pool).expect("read pool"),
        bytes,
        "verify never writes"
    );
}

#[test]
fn inspect_refuses_a_file_that_is_not_a_pool() {
    let path = std::env::temp_dir().join(format!("strata-not-a-pool-{}", std::process::id()));
    std::fs::write(&path, vec![7u8; 8192]).expect("write");
    let (status, _, stderr) = run_output(&["pool", "inspect", path.to_str().expect("utf-8")]);
    assert_eq!(status.code(), Some(1));
    assert!(stderr.starts_with("strata pool: "), "{stderr}");
    let _ = std::fs::remove_file(&path);
}
