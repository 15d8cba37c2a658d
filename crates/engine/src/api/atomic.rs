//! Groups of writes that a crash leaves all done or all undone (see `txlog`).

use super::*;
use crate::txlog::{Image, ItemFields, TxLog};
use crate::Door;

impl Engine {
    /// Runs `f`, whose writes touch only `keys`, so that a crash leaves all of them or none:
    /// the keys' before-images go to the pool's transaction log first, and are put back by
    /// the next open if the crash comes before `f` returns and its writes are committed (under
    /// `interval` and `sync`, this commits them, so an answered group is durable under both).
    /// Writes to keys not in `keys` are not covered. Without a pool file (DRAM) nothing
    /// survives a crash, and `f` simply runs.
    ///
    /// The caller keeps other writers of `keys` out while `f` runs (the server runs groups
    /// alone); each group takes a log of its own (`txlog::TxLogs`). A failure to write the log refuses the group (`f`
    /// does not run); a failure to end it latches writes off, as a failed persist does,
    /// because a restart would undo what `f` did. A panic in `f` undoes its writes before it
    /// goes on unwinding, as a crash would at the next open. With no keys there is nothing to
    /// undo, and no log is written.
    pub fn atomically<R>(&self, keys: &[&[u8]], f: impl FnOnce() -> R) -> Result<R, WriteError> {
        let Some(logs) = self.txlog.as_ref().filter(|_| !keys.is_empty()) else {
            return Ok(f());
        };
        let mut log = logs.take();
        self.inner.check_writable()?;
        write_before_images(&mut log, self, keys)?;
        let result = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(result) => result,
            Err(panic) => {
                if let Some(images) = log.running_images() {
                    if self.restore_images(&images).is_ok() {
                        let _ = log.end();
                    }
                }
                std::panic::resume_unwind(panic);
            }
        };
        self.commit()?;
        if let Err(error) = log.end() {
            let error = log_error(log.path(), "end", &error);
            if let WriteError::Persist(persist) = &error {
                let _ = self.inner.persisted(Err(persist.clone()));
            }
            return Err(error);
        }
        Ok(result)
    }

    /// Puts back the before-images of a group a crash interrupted, and commits them. Returns
    /// how many keys it restored.
    pub(crate) fn restore_images(&self, images: &[Image]) -> Result<u64, WriteError> {
        for image in images.iter().rev() {
            match &image.item {
                None => {
                    self.delete(&image.key, None)?;
                }
                Some(item) => {
                    let options = StoreOptions {
                        client_flags: item.client_flags,
                        expiry: item.expires_at_ms.map_or(Expiry::Never, Expiry::AtMs),
                        condition: Condition::Always,
                        kind: item.kind,
                    };
                    self.store(&image.key, &item.value, options)?;
                }
            }
        }
        self.commit()?;
        Ok(images.len() as u64)
    }
}

/// Writes the before-images of `keys`, as `door` reads them, as the log's running group.
pub(super) fn write_before_images(
    log: &mut TxLog,
    door: &impl Door,
    keys: &[&[u8]],
) -> Result<(), WriteError> {
    log.start();
    for key in keys {
        let pushed = door.peek(key, |item| {
            let fields = ItemFields {
                value: item.value,
                kind: item.kind,
                client_flags: item.client_flags,
                expires_at_ms: item.expires_at_ms,
            };
            log.push(key, Some(fields));
        });
        if pushed.is_none() {
            log.push(key, None);
        }
    }
    log.begin()
        .map_err(|error| log_error(log.path(), "write", &error))
}

pub(super) fn log_error(path: &std::path::Path, op: &str, error: &std::io::Error) -> WriteError {
    tracing::error!(path = %path.display(), op, %error, "the transaction log failed");
    WriteError::Persist(strata_pool::PersistError {
        offset: 0,
        len_bytes: 0,
        message: format!("transaction log {}: {op}: {error}", path.display()),
    })
}
