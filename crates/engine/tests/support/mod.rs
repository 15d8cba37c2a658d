//! What the engine's integration tests share: a pool file of their own, removed with every
//! file beside it (sidecar, transaction logs, index directory) when the test ends.

use std::path::{Path, PathBuf};

/// A pool path in `/dev/shm` (else `/tmp`); dropping it removes the pool and its companions.
pub struct TempPool(pub PathBuf);

impl Drop for TempPool {
    fn drop(&mut self) {
        let path = self.0.display().to_string();
        let _ = std::fs::remove_file(&self.0);
        let _ = std::fs::remove_file(format!("{path}.sidecar"));
        let _ = std::fs::remove_file(format!("{path}.txlog"));
        for lane in 1..4 {
            let _ = std::fs::remove_file(format!("{path}.txlog.{lane}"));
        }
        let _ = std::fs::remove_dir_all(format!("{path}.index"));
    }
}

/// A pool path named after `name` and this process (test binaries run at once).
pub fn temp_pool(name: &str) -> TempPool {
    let dir = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    TempPool(PathBuf::from(dir).join(format!("strata-engine-{}-{name}.pool", std::process::id())))
}
