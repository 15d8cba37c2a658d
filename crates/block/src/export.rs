//! An export: a name, a backing store and the cache mode between them. So far the only mode is
//! pass-through (`pt`): every request goes to the backing store; the cache modes of issue 12
//! (write-through, write-back, write-around, write-invalidate) put a strata pool in between.

use std::path::Path;
use std::sync::Arc;

use strata_pool::MediumError;

use crate::backing::Backing;
use crate::nbd;

/// A failed request's cause.
#[derive(Debug)]
pub struct IoFailure(pub MediumError);

impl From<MediumError> for IoFailure {
    fn from(err: MediumError) -> Self {
        IoFailure(err)
    }
}

impl IoFailure {
    /// The NBD error value for it: a full disk (a sparse backing file) is `ENOSPC`, a read-only
    /// one `EPERM`, anything else `EIO`.
    pub fn nbd_error(&self) -> u32 {
        match self.0 {
            MediumError::Io {
                os_error: Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG),
                ..
            } => nbd::ENOSPC,
            MediumError::Io {
                os_error: Some(libc::EROFS | libc::EPERM | libc::EACCES),
                ..
            } => nbd::EPERM,
            _ => nbd::EIO,
        }
    }
}

/// One export.
#[derive(Debug)]
pub struct Export {
    name: String,
    backing: Backing,
}

impl Export {
    /// Opens the backing store at `path` as export `name` (pass-through).
    pub fn open(name: &str, path: &Path) -> Result<Export, String> {
        Ok(Export {
            name: name.to_string(),
            backing: Backing::open(path)?,
        })
    }

    /// The export's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its size in bytes (the backing store's).
    pub fn size_bytes(&self) -> u64 {
        self.backing.size_bytes()
    }

    /// The backing store.
    pub fn backing(&self) -> &Backing {
        &self.backing
    }

    /// What the export supports, as NBD transmission flags. Multi-connection is safe: there is
    /// no per-connection state, and a flush reaches every connection's writes.
    pub fn transmission_flags(&self) -> u16 {
        nbd::TFLAG_HAS_FLAGS
            | nbd::TFLAG_SEND_FLUSH
            | nbd::TFLAG_SEND_FUA
            | nbd::TFLAG_SEND_TRIM
            | nbd::TFLAG_SEND_WRITE_ZEROES
            | nbd::TFLAG_CAN_MULTI_CONN
            | nbd::TFLAG_SEND_CACHE
    }

    /// Reads `out.len()` bytes at `offset` (a range the caller checked).
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), IoFailure> {
        Ok(self.backing.read_at(offset, out)?)
    }

    /// Writes `data` at `offset`; `fua`: durable before this returns.
    pub fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), IoFailure> {
        self.backing.write_at(offset, data)?;
        self.durable_if(fua)
    }

    /// Makes every completed write durable.
    pub fn flush(&self) -> Result<(), IoFailure> {
        Ok(self.backing.flush()?)
    }

    /// The range is no longer needed.
    pub fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), IoFailure> {
        self.backing.trim(offset, len)?;
        self.durable_if(fua)
    }

    /// Zeroes the range.
    pub fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<(), IoFailure> {
        self.backing.write_zeroes(offset, len)?;
        self.durable_if(fua)
    }

    fn durable_if(&self, fua: bool) -> Result<(), IoFailure> {
        if fua {
            self.flush()?;
        }
        Ok(())
    }
}

/// The server's exports, in the order given; the first is the default (the empty name).
#[derive(Debug, Default)]
pub struct Exports(Vec<Arc<Export>>);

impl Exports {
    /// Exports in order.
    pub fn new(exports: Vec<Export>) -> Exports {
        Exports(exports.into_iter().map(Arc::new).collect())
    }

    /// The export named `name`; the empty name is the first export.
    pub fn find(&self, name: &str) -> Option<Arc<Export>> {
        if name.is_empty() {
            return self.0.first().cloned();
        }
        self.0.iter().find(|e| e.name == name).cloned()
    }

    /// Every export.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Export>> {
        self.0.iter()
    }
}
