//! The `pool_open` target: the pool loaders, fed a pool file and the files beside it.
//!
//! The input is a small container ([`PoolInput`]): an options byte, then length-prefixed
//! sections holding the pool file, its sidecar, the index directory's control file and any
//! number of index table files. The check writes them to a scratch directory on `/dev/shm`, runs
//! the offline verifier (`strata pool verify`'s [`strata_engine::check_pool_file`]) on them, then
//! opens the pool with [`Engine::open`] and, if it opens, uses every read path.
//!
//! Checksums would stop nearly every mutation at the first check, so the options byte can ask
//! the harness to recompute them after the fuzzer's changes ([`OPT_FIX_CHECKSUMS`]): the pool
//! header's geometry and state lines, the engine root, every in-use segment header, every record
//! of each segment's log, and the sidecar's header and payload, all as docs/POOL_FORMAT.md
//! defines them. The fuzzer then reaches the checks behind the checksums: field ranges, the
//! sidecar's payload, the index files (which have no checksum), recovery's ordering.
//!
//! Invariants checked:
//! - Neither `check_pool_file` nor `Engine::open` panics: a damaged pool is refused with an
//!   error or opened.
//! - An opened engine answers every read without panicking: recovery report, stats, a full
//!   `scan` (which terminates), `get`/`peek`/`contains`/`get_many` of every key scanned,
//!   `random_key`; `check_integrity` may report damage but not panic; `close` returns.
//! - After `repair` and the scrub have run to their end, `check_integrity` passes and every
//!   key a scan returns is found by `get` under that key, whatever the damage.
//! - When recovery rebuilt the index from the records and `check_integrity` passes, every key
//!   the scan returned is found by `get` under that key. (An index restored from the sidecar or
//!   mapped from index files is taken as the clean stop or the crash left it; with checksums
//!   fixed, the fuzzer can rewrite a record's key under it, which no real pool does, so there
//!   the two may disagree without a bug.)

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_engine::{
    check_pool_file, Durability, Engine, EngineConfig, IndexPlacement, ManualClock, PoolLocation,
};

/// Options byte: recompute every checksum after the fuzzer's changes.
pub const OPT_FIX_CHECKSUMS: u8 = 0x01;
/// Options byte: stamp this machine's boot id into the pool's state line (a process crash on
/// this boot rather than a reboot), and fix the state checksum.
pub const OPT_SAME_BOOT: u8 = 0x02;
/// Options byte: open with the index placed in the pool (`<pool>.index/`).
pub const OPT_INDEX_IN_POOL: u8 = 0x04;
/// Options byte: pad the pool file with zeros (or cut it) to the length its header's geometry
/// gives, so seeds can leave out the zeros at the end of a pool.
pub const OPT_PAD: u8 = 0x08;
/// Options byte, two bits: durability to open with (none, interval, sync, sync + group commit).
pub const OPT_DURABILITY_SHIFT: u8 = 4;
/// Options byte: open a day after the fixtures were written, so items with a TTL have expired.
pub const OPT_LATE_CLOCK: u8 = 0x40;
/// Options byte: the pool section is sparse, a list of runs (`u32` offset, `u16` length, bytes)
/// laid on zeros, so a seed holds only a pool's non-zero bytes and the fuzzer's mutations land
/// on records and headers rather than on the empty tails of segments.
pub const OPT_SPARSE: u8 = 0x80;

/// Segment size of the seed pools, and of the open when the header's geometry is not usable.
pub const SEGMENT_SIZE_BYTES: u64 = 4096;
/// Segment count of the seed pools, likewise.
pub const SEGMENT_COUNT: u64 = 8;
/// Largest segment the harness configures from a pool header (bigger is refused as foreign).
const SEGMENT_SIZE_BYTES_MAX: u64 = 64 << 10;
/// Most segments the harness configures from a pool header.
const SEGMENT_COUNT_MAX: u64 = 64;
/// The clock the seed pools were written at (Unix ms); items' expiry times count from it.
pub const CLOCK_START_MS: u64 = 1_700_000_000_000;
/// How far after [`CLOCK_START_MS`] the pool is opened: a minute, or a day with
/// [`OPT_LATE_CLOCK`].
const OPEN_AFTER_MS: u64 = 60_000;
const OPEN_LATE_AFTER_MS: u64 = 24 * 3600 * 1000;
/// Longest pool image a sparse section may describe: the largest geometry configured from a
/// header, with room to spare; runs past it are ignored.
const SPARSE_LEN_MAX: usize = 8 << 20;
/// Longest run of a sparse pool section.
const RUN_LEN_MAX: usize = u16::MAX as usize;
/// Zero bytes that may sit inside one run rather than split it (a run costs 6 bytes).
const RUN_GAP_MAX: usize = 16;
/// Most `scan` calls before the scan counts as not terminating.
const SCAN_CALLS_MAX: usize = 100_000;

/// An index table file: shard, kind (`b'p'` primary or `b'o'` overflow), generation, bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableFile<'a> {
    /// Owning shard.
    pub shard: u16,
    /// `b'p'` or `b'o'`.
    pub kind: u8,
    /// Generation in the file name.
    pub generation: u8,
    /// Contents.
    pub bytes: &'a [u8],
}

/// What one input holds. Encoded as: options byte, then `u32` little-endian length + bytes for
/// the pool, the sidecar and the control file (length 0: no such file), then any number of
/// table sections, each `u32` length + `u16` shard + kind byte (even: `p`, odd: `o`) +
/// generation byte + bytes. A length past the end takes what is left.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolInput<'a> {
    /// The options byte (`OPT_*`).
    pub options: u8,
    /// The pool file.
    pub pool: &'a [u8],
    /// `<pool>.sidecar`, if any.
    pub sidecar: Option<&'a [u8]>,
    /// `<pool>.index/control`, if any.
    pub control: Option<&'a [u8]>,
    /// `<pool>.index/sNNNN-{p,o}G` files.
    pub tables: Vec<TableFile<'a>>,
}

impl<'a> PoolInput<'a> {
    /// Splits a fuzzer input into its parts; any bytes decode to something.
    pub fn decode(data: &'a [u8]) -> PoolInput<'a> {
        let Some((&options, mut rest)) = data.split_first() else {
            return PoolInput::default();
        };
        let mut input = PoolInput {
            options,
            pool: section(&mut rest),
            ..PoolInput::default()
        };
        input.sidecar = Some(section(&mut rest)).filter(|s| !s.is_empty());
        input.control = Some(section(&mut rest)).filter(|s| !s.is_empty());
        while !rest.is_empty() {
            let table = section(&mut rest);
            let Some((head, bytes)) = table.split_at_checked(4) else {
                break;
            };
            input.tables.push(TableFile {
                shard: u16::from_le_bytes([head[0], head[1]]),
                kind: if head[2] % 2 == 0 { b'p' } else { b'o' },
                generation: head[3],
                bytes,
            });
        }
        input
    }

    /// The inverse of [`PoolInput::decode`], for writing seeds.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![self.options];
        for part in [Some(self.pool), self.sidecar, self.control] {
            let part = part.unwrap_or_default();
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part);
        }
        for table in &self.tables {
            out.extend_from_slice(&(table.bytes.len() as u32 + 4).to_le_bytes());
            out.extend_from_slice(&table.shard.to_le_bytes());
            out.push(u8::from(table.kind == b'o'));
            out.push(table.generation);
            out.extend_from_slice(table.bytes);
        }
        out
    }
}

/// Takes one `u32`-length-prefixed section from the front of `rest`.
fn section<'a>(rest: &mut &'a [u8]) -> &'a [u8] {
    let Some((len, after)) = rest.split_at_checked(4) else {
        *rest = &[];
        return &[];
    };
    let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
    let (part, after) = after.split_at(len.min(after.len()));
    *rest = after;
    part
}

/// Runs every check on one input; panics when an invariant fails.
pub fn check(data: &[u8]) {
    let _ = run(data);
}

/// What one input did: the summary is for tests that make sure the seeds reach past the open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `Engine::open` refused the files with this error.
    Refused(String),
    /// The engine opened; a full scan returned this many keys.
    Opened {
        /// Keys the scan returned.
        keys: usize,
        /// Whether `check_integrity` passed.
        sound: bool,
    },
}

/// Runs every check on one input and says how far it got; panics when an invariant fails.
pub fn run(data: &[u8]) -> Outcome {
    let input = PoolInput::decode(data);
    let dir = scratch_dir();
    let pool_path = dir.join("pool");
    let geometry = write_files(&input, &pool_path);
    // The offline verifier reads the files as given; it must refuse or report, never panic.
    if let Ok(report) = check_pool_file(&pool_path) {
        let _ = format!("{report:?}");
    }
    let engine = match Engine::open(config(&input, &pool_path, geometry)) {
        Ok(engine) => engine,
        Err(error) => return Outcome::Refused(error.to_string()),
    };
    let outcome = use_every_read_path(&engine);
    let _ = engine.close();
    drop(engine);
    // What the engine left must not upset the verifier either.
    let _ = check_pool_file(&pool_path).map(|report| format!("{report:?}"));
    outcome
}

/// The engine configuration for this input: the geometry found in the pool header when it is
/// usable (else the seeds' own), two shards for a pool the open creates, the durability and
/// index placement the options ask for, and a manual clock.
fn config(input: &PoolInput<'_>, pool_path: &Path, geometry: (u64, u64)) -> EngineConfig {
    let (durability, group_commit) = match (input.options >> OPT_DURABILITY_SHIFT) & 3 {
        0 => (Durability::None, false),
        1 => (Durability::Interval { ms: 1000 }, false),
        2 => (Durability::Sync, false),
        _ => (Durability::Sync, true),
    };
    let index_placement = if input.options & OPT_INDEX_IN_POOL != 0 {
        IndexPlacement::Pool
    } else {
        IndexPlacement::Dram
    };
    let after_ms = if input.options & OPT_LATE_CLOCK != 0 {
        OPEN_LATE_AFTER_MS
    } else {
        OPEN_AFTER_MS
    };
    let (segment_size_bytes, segment_count) = geometry;
    EngineConfig {
        memory_bytes: segment_size_bytes * segment_count,
        segment_size_bytes,
        pool: PoolLocation::File(pool_path.to_path_buf()),
        shard_count: 2,
        durability,
        group_commit,
        index_placement,
        clock: Arc::new(ManualClock::new(CLOCK_START_MS + after_ms)),
        ..EngineConfig::default()
    }
}

/// Reads everything an opened engine offers to read.
fn use_every_read_path(engine: &Engine) -> Outcome {
    let _ = format!("{:?} {:?}", engine.recovery_report(), engine.stats());
    let keys = scan_all(engine);
    let mut found = Vec::with_capacity(keys.len());
    for key in &keys {
        let got = engine.get(key, |item| {
            item.key == &key[..] && item.value.len() < 1 << 30
        });
        let _ = engine.peek(key, |item| {
            (item.cas, item.expires_at_ms, item.client_flags)
        });
        let _ = engine.contains(key);
        found.push(got);
    }
    let borrowed: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
    engine.prefetch(&borrowed);
    engine.get_many(borrowed.iter().copied(), |_, item| {
        let _ = item.map(|item| item.value.len());
    });
    for seed in 0..4 {
        let _ = engine.random_key(seed);
    }
    let _ = engine.len();
    let sound = engine.check_integrity().is_ok();
    scrub_and_check(engine);
    let report = engine.recovery_report();
    let rebuilt = !report.from_snapshot && report.shards_from_index_files == 0;
    if sound && rebuilt {
        for (key, got) in keys.iter().zip(&found) {
            assert_eq!(*got, Some(true), "scanned key {key:?} not found by get");
        }
    }
    Outcome::Opened {
        keys: keys.len(),
        sound,
    }
}

/// Most scrub steps a pool of the fuzzer's size can need.
const SCRUB_STEPS_MAX: usize = 1 << 20;

/// Runs the repair and the scrub to the end: then the engine must be sound whatever the damage,
/// and every key a scan returns must be found by `get`.
fn scrub_and_check(engine: &Engine) {
    engine.repair();
    let mut steps = 0;
    while !engine.scrub_step() {
        steps += 1;
        assert!(steps < SCRUB_STEPS_MAX, "the scrub does not end");
    }
    engine.repair();
    if let Err(problem) = engine.check_integrity() {
        panic!("unsound after the scrub: {problem}");
    }
    for key in scan_all(engine) {
        let found = engine.get(&key, |item| item.key == &key[..]);
        assert_eq!(
            found,
            Some(true),
            "scanned key {key:?} not found by get after the scrub"
        );
    }
}

/// Every key a full scan returns, in scan order.
fn scan_all(engine: &Engine) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    let mut cursor = 0;
    for _ in 0..SCAN_CALLS_MAX {
        cursor = engine.scan(cursor, 16, &mut |key| keys.push(key.to_vec()));
        if cursor == 0 {
            return keys;
        }
    }
    panic!("scan did not finish in {SCAN_CALLS_MAX} calls");
}

/// Environment variable naming the folder to make scratch directories in (default `/dev/shm`,
/// tmpfs as the engine's tests use, else the system's temporary folder).
pub const SCRATCH_ENV: &str = "STRATA_FUZZ_SCRATCH";

thread_local! {
    /// This thread's scratch directory, made on first use: threads of one test binary replay
    /// inputs at the same time, and each needs its own pool file and lock.
    static SCRATCH: std::cell::RefCell<Option<PathBuf>> = const { std::cell::RefCell::new(None) };
}

pub(crate) fn scratch_dir() -> PathBuf {
    static THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    SCRATCH.with_borrow_mut(|dir| {
        dir.get_or_insert_with(|| {
            let base = std::env::var_os(SCRATCH_ENV).map_or_else(
                || {
                    let shm = Path::new("/dev/shm");
                    if shm.is_dir() {
                        shm.to_path_buf()
                    } else {
                        std::env::temp_dir()
                    }
                },
                PathBuf::from,
            );
            let thread = THREADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = base.join(format!("strata-fuzz-{}-{thread}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create the scratch directory");
            dir
        })
        .clone()
    })
}

/// Removes this thread's scratch directory and what it holds (the next check makes a new one).
pub fn remove_scratch_dir() {
    if let Some(dir) = SCRATCH.with_borrow_mut(Option::take) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Writes the input's files (replacing the last input's) and returns the geometry to open with.
fn write_files(input: &PoolInput<'_>, pool_path: &Path) -> (u64, u64) {
    let sidecar_path = with_suffix(pool_path, ".sidecar");
    let index_dir = with_suffix(pool_path, ".index");
    let _ = std::fs::remove_file(&sidecar_path);
    let _ = std::fs::remove_file(with_suffix(pool_path, ".txlog"));
    let _ = std::fs::remove_dir_all(&index_dir);
    let mut pool = if input.options & OPT_SPARSE != 0 {
        unpack_sparse(input.pool)
    } else {
        input.pool.to_vec()
    };
    let geometry = usable_geometry(&pool);
    if input.options & OPT_PAD != 0 {
        pool.resize(pool_len_bytes(geometry) as usize, 0);
    }
    if input.options & OPT_SAME_BOOT != 0 && pool.len() >= 164 {
        pool[144..160].copy_from_slice(&strata_pool::current_boot_id());
        put_crc(&mut pool, 160, 128..160);
    }
    let mut sidecar = input.sidecar.map(<[u8]>::to_vec);
    if input.options & OPT_FIX_CHECKSUMS != 0 {
        fix_pool_checksums(&mut pool);
        if let Some(sidecar) = &mut sidecar {
            fix_sidecar_checksums(sidecar);
        }
    }
    std::fs::write(pool_path, &pool).expect("write the pool file");
    if let Some(sidecar) = sidecar {
        std::fs::write(&sidecar_path, sidecar).expect("write the sidecar");
    }
    if input.control.is_some() || !input.tables.is_empty() {
        std::fs::create_dir_all(&index_dir).expect("create the index directory");
    }
    if let Some(control) = input.control {
        std::fs::write(index_dir.join("control"), control).expect("write the control file");
    }
    for table in &input.tables {
        let name = format!(
            "s{:04}-{}{}",
            table.shard, table.kind as char, table.generation
        );
        std::fs::write(index_dir.join(name), table.bytes).expect("write an index table");
    }
    geometry
}

/// Lays the runs of a sparse pool section on zeros.
pub fn unpack_sparse(mut runs: &[u8]) -> Vec<u8> {
    let mut image = Vec::new();
    while let Some((head, rest)) = runs.split_at_checked(6) {
        let offset = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let len = usize::from(u16::from_le_bytes([head[4], head[5]])).min(rest.len());
        let (bytes, rest) = rest.split_at(len);
        runs = rest;
        if offset + len > SPARSE_LEN_MAX {
            continue;
        }
        if image.len() < offset + len {
            image.resize(offset + len, 0);
        }
        image[offset..offset + len].copy_from_slice(bytes);
    }
    image
}

/// The runs of non-zero bytes of `image` as a sparse pool section (the inverse of
/// [`unpack_sparse`] up to trailing zeros).
pub fn pack_sparse(image: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(skip) = image[at..].iter().position(|&b| b != 0) {
        let start = at + skip;
        let mut end = start;
        // Extend the run over short gaps of zeros, up to the longest run.
        while end < image.len() && end - start < RUN_LEN_MAX {
            let zeros = image[end..].iter().take_while(|&&b| b == 0).count();
            if zeros == 0 {
                end += 1;
            } else if zeros <= RUN_GAP_MAX && end + zeros < image.len() {
                end = (end + zeros).min(start + RUN_LEN_MAX);
            } else {
                break;
            }
        }
        out.extend_from_slice(&(start as u32).to_le_bytes());
        out.extend_from_slice(&((end - start) as u16).to_le_bytes());
        out.extend_from_slice(&image[start..end]);
        at = end;
    }
    out
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// The geometry in the pool header when it is small enough to configure, else the seeds'.
pub fn usable_geometry(pool: &[u8]) -> (u64, u64) {
    let (size, count) = (read_u64(pool, 16), read_u64(pool, 24));
    match (size, count) {
        (Some(size), Some(count))
            if size.is_multiple_of(4096)
                && (4096..=SEGMENT_SIZE_BYTES_MAX).contains(&size)
                && (2..=SEGMENT_COUNT_MAX).contains(&count) =>
        {
            (size, count)
        }
        _ => (SEGMENT_SIZE_BYTES, SEGMENT_COUNT),
    }
}

/// Where a pool's segment data starts: after the header page and the segment table.
fn data_offset(segment_count: u64) -> u64 {
    4096 + (64 * segment_count).next_multiple_of(4096)
}

/// The exact length of a pool file of this geometry.
pub fn pool_len_bytes((segment_size_bytes, segment_count): (u64, u64)) -> u64 {
    data_offset(segment_count) + segment_size_bytes * segment_count
}

pub(crate) fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// Writes at `at` the CRC32C of `covered`, if both fit in `bytes`.
pub(crate) fn put_crc(bytes: &mut [u8], at: usize, covered: std::ops::Range<usize>) {
    if at + 4 <= bytes.len() && covered.end <= bytes.len() {
        let crc = crc32c::crc32c(&bytes[covered]);
        bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Recomputes every checksum of a pool image, as docs/POOL_FORMAT.md defines them.
pub fn fix_pool_checksums(pool: &mut [u8]) {
    put_crc(pool, 64, 0..64);
    put_crc(pool, 160, 128..160);
    put_crc(pool, 1024 + 60, 1024..1024 + 60);
    let (segment_size, segment_count) = usable_geometry(pool);
    for id in 0..segment_count {
        let line = (4096 + 64 * id) as usize;
        let Some(header) = pool.get(line..line + 64) else {
            return;
        };
        if header.iter().all(|&b| b == 0) {
            continue;
        }
        put_crc(pool, line + 60, line..line + 60);
        let start = (data_offset(segment_count) + id * segment_size) as usize;
        let end = (start + segment_size as usize).min(pool.len());
        if let Some(segment) = pool.get_mut(start..end) {
            fix_record_checksums(segment);
        }
    }
}

/// Walks a segment's log from its start, recomputing each record's checksum, and stops where
/// the log ends or a record does not fit.
fn fix_record_checksums(segment: &mut [u8]) {
    let mut offset = 0;
    while let Some(end) = fix_record_checksum(&mut segment[offset..]) {
        offset += end.next_multiple_of(8);
    }
}

/// Recomputes the checksum of the record at the start of `bytes` (docs/POOL_FORMAT.md,
/// "Records"); returns where its key and value end, or `None` (nothing written) when no
/// record fits there.
pub fn fix_record_checksum(bytes: &mut [u8]) -> Option<usize> {
    let end = record_end(bytes)?;
    let head = [bytes[0] & 0x0F, bytes[1], bytes[2], bytes[3]];
    let crc = crc32c::crc32c_append(crc32c::crc32c(&head), &bytes[8..end]);
    bytes[4..8].copy_from_slice(&crc.to_le_bytes());
    Some(end)
}

/// The end of the key and value of the record at the start of `bytes` (live or dead), or `None`
/// at the end of the log or when the record's fields do not fit.
fn record_end(bytes: &[u8]) -> Option<usize> {
    let state = bytes.first()? & 0xF0;
    if state != 0xA0 && state != 0xD0 {
        return None;
    }
    let flags = bytes[0] & 0x0F;
    let mut at = 8;
    let (key_len, value_len) = if flags & 0x1 == 0 {
        let head = bytes.get(..4)?;
        (
            usize::from(head[1]),
            usize::from(u16::from_le_bytes([head[2], head[3]])),
        )
    } else {
        let lens = bytes.get(8..16)?;
        at += 8;
        let key_len = u32::from_le_bytes(lens[..4].try_into().ok()?) as usize;
        (
            key_len,
            u32::from_le_bytes(lens[4..].try_into().ok()?) as usize,
        )
    };
    at += 8 * usize::from(flags & 0x2 != 0) + 8 * usize::from(flags & 0x4 != 0);
    at += 4 * usize::from(flags & 0x8 != 0);
    let end = at.checked_add(key_len)?.checked_add(value_len)?;
    (key_len > 0 && end.next_multiple_of(8) <= bytes.len()).then_some(end)
}

/// Recomputes a sidecar's payload and header checksums.
pub fn fix_sidecar_checksums(sidecar: &mut [u8]) {
    if sidecar.len() < 48 {
        return;
    }
    put_crc(sidecar, 32, 48..sidecar.len());
    let crc = crc32c::crc32c(&sidecar[..36]) ^ crc32c::crc32c(&sidecar[40..48]);
    sidecar[36..40].copy_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_round_trip_through_the_container() {
        let input = PoolInput {
            options: OPT_FIX_CHECKSUMS | OPT_PAD,
            pool: b"pool bytes",
            sidecar: Some(b"side"),
            control: None,
            tables: vec![TableFile {
                shard: 3,
                kind: b'o',
                generation: 17,
                bytes: b"table",
            }],
        };
        assert_eq!(PoolInput::decode(&input.encode()), input);
        assert_eq!(PoolInput::decode(&[]), PoolInput::default());
        let cut = PoolInput::decode(&[1, 200, 0, 0, 0, b'x']);
        assert_eq!((cut.options, cut.pool), (1, &b"x"[..]));
    }

    #[test]
    fn sparse_sections_round_trip() {
        let mut image = vec![0u8; 200_000];
        image[5] = 1;
        image[20] = 2;
        image[1000..1100].fill(3);
        image[100_000..170_000].fill(4);
        image[199_999] = 5;
        let packed = pack_sparse(&image);
        assert!(packed.len() < 71_000, "{} bytes", packed.len());
        assert_eq!(unpack_sparse(&packed), image);
        assert_eq!(unpack_sparse(&pack_sparse(&[0; 10])), Vec::<u8>::new());
        // A run past the bound is ignored; a cut run keeps what is there.
        let far = [0xFF, 0xFF, 0xFF, 0x7F, 1, 0, 9];
        assert_eq!(unpack_sparse(&far), Vec::<u8>::new());
        assert_eq!(unpack_sparse(&[2, 0, 0, 0, 9, 0, 7]), vec![0, 0, 7]);
    }

    #[test]
    fn geometry_falls_back_to_the_seeds() {
        assert_eq!(usable_geometry(&[]), (SEGMENT_SIZE_BYTES, SEGMENT_COUNT));
        let mut header = vec![0u8; 64];
        header[16..24].copy_from_slice(&8192u64.to_le_bytes());
        header[24..32].copy_from_slice(&3u64.to_le_bytes());
        assert_eq!(usable_geometry(&header), (8192, 3));
        assert_eq!(pool_len_bytes((8192, 3)), 8192 + 3 * 8192);
    }
}
