//! Errors the engine reports. Variants say what happened and what to do.

use strata_pool::{PersistError, PoolError};

/// Why the engine could not open.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// A setting is out of range.
    #[error("invalid engine configuration: {0}")]
    Config(&'static str),
    /// The pool could not be created or opened.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The pool's engine root area is not ours or is damaged.
    #[error("pool root area is invalid ({0}); refusing to use the pool — restore it or start fresh explicitly")]
    Root(&'static str),
    /// The flash tier could not be opened.
    #[error(transparent)]
    Flash(#[from] crate::FlashError),
    /// Persisting during open failed.
    #[error("persist failed while opening the pool: {0}")]
    Persist(#[from] PersistError),
    /// The transaction log beside the pool could not be read, or its interrupted group undone.
    #[error("transaction log: {0}")]
    Txlog(String),
}

/// A read of an item of several records (an owner and its parts) found its owner owning a
/// part the index lacks: damage, found as it was read. The engine drops the item whole at its
/// next repair (`Engine::repair`); until then a read of that part answers this, so nobody is
/// served the item with a part left out.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[error("the item lacks a part it owns (damaged); it is dropped at the next repair")]
pub struct FamilyBroken;

/// Why a write was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteError {
    /// Keys must have at least one byte.
    #[error("empty key")]
    KeyEmpty,
    /// The key is longer than the engine accepts.
    #[error("key of {len} bytes exceeds the limit of {max}")]
    KeyTooLong {
        /// Key length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The value (with key and header) does not fit the limits.
    #[error("item of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Value length.
        len: usize,
        /// Largest value accepted for this key.
        max: usize,
    },
    /// No space could be made (eviction is off, or nothing is evictable).
    #[error("out of memory")]
    OutOfMemory,
    /// A persist failed; the engine refuses writes until it is reopened.
    #[error("persist failed, writes refused until restart: {0}")]
    Persist(PersistError),
    /// The key holds another kind of value than the operation works on
    /// ([`crate::Engine::modify_as`]); nothing was changed.
    #[error("the key holds another kind of value")]
    WrongKind,
    /// The string is too long for one record and is kept in several, which only a
    /// transaction writes (its log keeps their before-images): the caller runs the operation
    /// again in one ([`crate::Engine::transaction`]). Nothing was changed.
    #[error("a string of several records is written only inside a transaction")]
    NeedsTransaction,
}
