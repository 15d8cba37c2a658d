//! The block cache under a real file system, the path a database takes on a machine without the
//! kernel's `nbd` module: `strata block` (write-back, its cache in a pool) ← `nbdfuse` (the
//! export as a file) ← `losetup --direct-io` (a block device) ← `mkfs.ext4` and `mount`. Files
//! are written and synced, everything is unmounted, the server is killed with SIGKILL while the
//! files' blocks are still dirty in its cache, and started again: `e2fsck` must find the file
//! system clean and every file must read back. Then a write-through start writes the dirty
//! lines back, and the backing file alone, mounted without strata, holds the same files.
//!
//! Needs root (loop devices, mounts), `/dev/fuse`, nbdfuse (libnbd-bin) and e2fsprogs; fails,
//! never skips, without them.

mod harness;

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::WAIT_MAX;

/// Runs a command; panics with its output when it fails. Returns its stdout.
fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < WAIT_MAX, "waited too long for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Server(Child);

impl Server {
    fn start(dir: &Path, store: &Path, flags: &[&str]) -> Server {
        let socket = dir.join("nbd.sock");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("block.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .arg("block")
            .args(flags)
            .arg("--export")
            .arg(format!("disk={}", store.display()))
            .arg("--nbd-listen")
            .arg(format!("unix:{}", socket.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        wait_for("the NBD socket", || UnixStream::connect(&socket).is_ok());
        Server(child)
    }

    fn signal(mut self, signal: &str) {
        run("kill", &[signal, &self.0.id().to_string()]);
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A file system mounted on a block device: over the NBD export through nbdfuse, or over a
/// file. Unmounted and torn down on drop, also when a check fails.
struct Mounted {
    mnt: PathBuf,
    fuse_dir: Option<PathBuf>,
    nbdfuse: Option<Child>,
    loop_device: Option<String>,
}

impl Mounted {
    /// Presents the export as a file with nbdfuse and puts a loop device on it.
    fn export(dir: &Path) -> Mounted {
        let fuse_dir = dir.join("fuse");
        std::fs::create_dir_all(&fuse_dir).unwrap();
        let uri = format!("nbd+unix:///disk?socket={}", dir.join("nbd.sock").display());
        let nbdfuse = Command::new("nbdfuse")
            .arg(fuse_dir.join("disk"))
            .arg(&uri)
            .stdin(Stdio::null())
            .spawn()
            .expect("nbdfuse (libnbd-bin)");
        let mut mounted = Mounted {
            mnt: dir.join("mnt"),
            fuse_dir: Some(fuse_dir.clone()),
            nbdfuse: Some(nbdfuse),
            loop_device: None,
        };
        let file = fuse_dir.join("disk");
        wait_for("nbdfuse's file", || {
            std::fs::metadata(&file).is_ok_and(|m| m.len() > 0)
        });
        mounted.attach(&file);
        mounted
    }

    /// A loop device on a plain file.
    fn file(dir: &Path, file: &Path) -> Mounted {
        let mut mounted = Mounted {
            mnt: dir.join("mnt"),
            fuse_dir: None,
            nbdfuse: None,
            loop_device: None,
        };
        mounted.attach(file);
        mounted
    }

    fn attach(&mut self, file: &Path) {
        let device = run(
            "losetup",
            &["-f", "--show", "--direct-io=on", file.to_str().unwrap()],
        );
        self.loop_device = Some(device);
    }

    fn device(&self) -> &str {
        self.loop_device.as_deref().unwrap()
    }

    fn mount(&self) {
        std::fs::create_dir_all(&self.mnt).unwrap();
        run("mount", &[self.device(), self.mnt.to_str().unwrap()]);
    }

    fn unmount(&mut self) {
        let _ = Command::new("umount").arg(&self.mnt).status();
        if let Some(device) = self.loop_device.take() {
            let _ = Command::new("losetup").args(["-d", &device]).status();
        }
        if let Some(fuse_dir) = self.fuse_dir.take() {
            let _ = Command::new("umount").arg(&fuse_dir).status();
        }
        if let Some(mut nbdfuse) = self.nbdfuse.take() {
            let started = Instant::now();
            while nbdfuse.try_wait().ok().flatten().is_none() && started.elapsed() < WAIT_MAX {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = nbdfuse.kill();
            let _ = nbdfuse.wait();
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// File `i`'s bytes.
fn file_bytes(i: usize) -> Vec<u8> {
    (0..(64 << 10) + i * 4099)
        .map(|j| (j.wrapping_mul(2654435761) >> (i % 13)) as u8 ^ i as u8)
        .collect()
}

const FILES: usize = 24;

fn check_files(mnt: &Path, what: &str) {
    for i in 0..FILES {
        let got = std::fs::read(mnt.join(format!("f{i}"))).unwrap();
        assert!(got == file_bytes(i), "{what}: file f{i} differs");
    }
}

#[test]
fn ext4_on_a_write_back_export_survives_kill_9_and_its_store_ends_up_with_every_file() {
    let dir = std::env::temp_dir().join(format!("strata-block-fs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = dir.join("store.img");
    std::fs::write(&store, vec![0u8; 64 << 20]).unwrap();
    let pool_file = harness::PoolFile::on_tmpfs("block-fs");
    let wb = [
        "--mode",
        "wb",
        "--cache-size",
        "128MiB",
        "--cache",
        pool_file.path(),
        "--clean-staleness",
        "3600",
    ];
    let server = Server::start(&dir, &store, &wb);
    let mut mounted = Mounted::export(&dir);
    run("mkfs.ext4", &["-q", "-F", mounted.device()]);
    mounted.mount();
    for i in 0..FILES {
        std::fs::write(mounted.mnt.join(format!("f{i}")), file_bytes(i)).unwrap();
    }
    run("sync", &["-f", mounted.mnt.to_str().unwrap()]);
    mounted.unmount();
    // The files are in the cache's dirty lines, not yet in the store.
    assert!(
        std::fs::read(&store).unwrap().iter().all(|&b| b == 0),
        "write-back wrote the store before its staleness time"
    );
    server.signal("-KILL");

    let server = Server::start(&dir, &store, &wb);
    let mut mounted = Mounted::export(&dir);
    run("e2fsck", &["-f", "-n", mounted.device()]);
    mounted.mount();
    check_files(&mounted.mnt, "after kill -9");
    mounted.unmount();
    server.signal("-TERM");

    // A write-through start writes the dirty lines back before it serves; the store alone
    // then holds the file system.
    let wt = [&["--mode", "wt"], &wb[2..]].concat();
    let server = Server::start(&dir, &store, &wt);
    server.signal("-TERM");
    let log = std::fs::read_to_string(dir.join("block.log")).unwrap();
    assert!(
        log.contains("dirty lines from the last run written back before serving"),
        "{log}"
    );
    let mut mounted = Mounted::file(&dir, &store);
    run("e2fsck", &["-f", "-n", mounted.device()]);
    mounted.mount();
    check_files(&mounted.mnt, "the store without strata");
    mounted.unmount();
    let _ = std::fs::remove_dir_all(&dir);
}
