//! Large-hash commands across power cuts: a session on a simulated pool (the power-failure
//! simulator of `strata_pool::testing`) with its transaction logs, as the server runs it.
//!
//! A large hash is an owner record and chunk records (parts); every write command on it runs
//! in a logged transaction. After a power cut, whatever cache lines the pool kept of what was
//! not persisted, the hash must be exactly what the acknowledged commands made (under `sync`
//! every write is persisted before its reply, under `interval` a logged transaction's are
//! persisted before it ends), and a command cut by a failed persist must be there whole or
//! not at all.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use strata_engine::{Durability, Engine, EngineConfig, PoolLocation};
use strata_pool::testing::SimulatedPersistence;
use strata_pool::Pool;

use super::*;

/// Fields of the test hash (chunked: 300 of about 50 bytes are past 8 KiB).
const FIELDS: usize = 300;
/// A day in milliseconds: the tests' field expiry, which never passes while they run.
const FIELD_TTL_MS: &str = "86400000";

/// Each field's value and whether it has an expiry.
type Model = BTreeMap<String, (String, bool)>;

/// A directory for the transaction logs, on tmpfs where there is one; removed when dropped.
struct LogDir(PathBuf);

impl LogDir {
    fn new(name: &str) -> LogDir {
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        // Tests run in parallel in one process: a count keeps two of theirs apart.
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = base.join(format!("strata-hash-cut-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("log directory");
        LogDir(dir)
    }

    /// The path the logs are named after.
    fn pool(&self) -> PathBuf {
        self.0.join("pool")
    }

    /// What a power cut leaves of the logs: all of them (each step is made durable before
    /// the next one starts).
    fn copy_to(&self, crashed: &LogDir) {
        for entry in std::fs::read_dir(&self.0).expect("log directory") {
            let path = entry.expect("entry").path();
            let name = path.file_name().expect("a file name");
            std::fs::copy(&path, crashed.0.join(name)).expect("copy a log");
        }
    }
}

impl Drop for LogDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(durability: Durability, fail_persist_from: Option<u64>) -> EngineConfig {
    sized_config(durability, fail_persist_from, ROOMY)
}

/// [`config`] with a pool of `shape.segments` segments of 16 KiB and `shape.shards` shards.
fn sized_config(
    durability: Durability,
    fail_persist_from: Option<u64>,
    shape: Shape,
) -> EngineConfig {
    EngineConfig {
        memory_bytes: shape.segments as u64 * 16384,
        segment_size_bytes: 16384,
        shard_count: shape.shards,
        pool: PoolLocation::Simulated(match fail_persist_from {
            Some(call) => SimulatedPersistence::failing_from(call),
            None => SimulatedPersistence::new(),
        }),
        durability,
        ..EngineConfig::default()
    }
}

fn simulation(config: &EngineConfig) -> &SimulatedPersistence {
    match &config.pool {
        PoolLocation::Simulated(simulation) => simulation,
        other => panic!("not a simulated pool: {other:?}"),
    }
}

/// Command `n` on the hash `h`, as its arguments (values name `n`, so states differ).
fn random_command(rng: &mut SmallRng, n: usize) -> Vec<String> {
    let field = |rng: &mut SmallRng| format!("f{}", rng.gen_range(0..FIELDS));
    // Values of 20 to 400 bytes: chunks grow and shrink, and some writes split one.
    let value = |name: &str, width: usize| format!("{:x<width$}", format!("{n}-{name}-"));
    let mut args: Vec<String> = Vec::new();
    match rng.gen_range(0..20) {
        0..=10 => {
            // One field, or three: most often in different chunks, one transaction for all.
            args.extend(["HSET".into(), "h".into()]);
            for _ in 0..if n.is_multiple_of(2) { 1 } else { 3 } {
                let name = field(rng);
                let width = rng.gen_range(20..400);
                args.push(value(&name, width));
                args.insert(args.len() - 1, name);
            }
        }
        11..=13 => args.extend(["HDEL".into(), "h".into(), field(rng), field(rng)]),
        14..=17 => {
            args.extend(["HPEXPIRE", "h", FIELD_TTL_MS, "FIELDS", "2"].map(String::from));
            args.extend([field(rng), field(rng)]);
        }
        _ => {
            args.extend(["HPERSIST", "h", "FIELDS", "1"].map(String::from));
            args.push(field(rng));
        }
    }
    args
}

/// `model` after `args` ran.
fn apply(model: &mut Model, args: &[String]) {
    match args[0].as_str() {
        "HSET" => {
            for pair in args[2..].chunks_exact(2) {
                model.insert(pair[0].clone(), (pair[1].clone(), false));
            }
        }
        "HDEL" => {
            for name in &args[2..] {
                model.remove(name);
            }
        }
        "HPEXPIRE" | "HPERSIST" => {
            let expiring = args[0] == "HPEXPIRE";
            let first = if expiring { 5 } else { 4 };
            for name in &args[first..] {
                if let Some((_, e)) = model.get_mut(name) {
                    *e = expiring;
                }
            }
        }
        other => unreachable!("{other}"),
    }
}

/// The lines of a RESP2 reply (lengths and element counts dropped): the elements of an
/// array of bulk strings or integers.
fn elements(reply: &[u8]) -> Vec<String> {
    let text = String::from_utf8(reply.to_vec()).expect("a text reply");
    let mut lines = text.split("\r\n").filter(|line| !line.is_empty());
    let header = lines.next().expect("a reply");
    assert!(header.starts_with('*'), "an array: {text:?}");
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        if let Some(int) = line.strip_prefix(':') {
            out.push(int.to_owned());
        } else if line.starts_with('$') {
            out.push(lines.next().expect("a bulk").to_owned());
        } else {
            panic!("unexpected {line:?} in {text:?}");
        }
    }
    out
}

/// The hash `h` as a session on `ctx` reads it: HGETALL, then HPTTL of every field found.
fn read_hash(ctx: &ServerContext) -> Model {
    read_hash_at(ctx, "h")
}

/// The hash at `key` as a session on `ctx` reads it (see [`read_hash`]).
fn read_hash_at(ctx: &ServerContext, key: &str) -> Model {
    let mut session = RespSession::new(1);
    let all = elements(&run_args(&mut session, ctx, &["HGETALL", key]));
    if all.is_empty() {
        return Model::new();
    }
    let names: Vec<&str> = all.chunks_exact(2).map(|pair| pair[0].as_str()).collect();
    let count = names.len().to_string();
    let mut hpttl = vec!["HPTTL", key, "FIELDS", count.as_str()];
    hpttl.extend(names.iter().copied());
    let ttls = elements(&run_args(&mut session, ctx, &hpttl));
    assert_eq!(ttls.len(), names.len(), "an HPTTL for every field");
    all.chunks_exact(2)
        .zip(&ttls)
        .map(|(pair, ttl)| {
            let ttl: i64 = ttl.parse().expect("an integer");
            assert!(ttl == -1 || ttl > 0, "{}: HPTTL {ttl}", pair[0]);
            (pair[0].clone(), (pair[1].clone(), ttl > 0))
        })
        .collect()
}

/// Makes the test hash `h` of `FIELDS` fields of about 50 bytes in one HSET; its model, or
/// `None` when a failed persist refused the HSET.
fn make_hash(session: &mut RespSession, ctx: &ServerContext) -> Option<Model> {
    make_hash_at(session, ctx, "h")
}

/// [`make_hash`] at `key`.
fn make_hash_at(session: &mut RespSession, ctx: &ServerContext, key: &str) -> Option<Model> {
    let mut make = vec!["HSET".to_owned(), key.into()];
    for f in 0..FIELDS {
        make.push(format!("f{f}"));
        make.push(format!("{:x<40}", format!("0-f{f}-")));
    }
    let args: Vec<&str> = make.iter().map(String::as_str).collect();
    if run_args(session, ctx, &args) != format!(":{FIELDS}\r\n").as_bytes() {
        return None;
    }
    let mut model = Model::new();
    apply(&mut model, &make);
    Some(model)
}

/// The pool and the run of commands a seed cuts.
#[derive(Clone, Copy)]
struct Shape {
    /// The pool's segments of 16 KiB.
    segments: usize,
    /// The engine's shards.
    shards: usize,
    /// The commands after the make.
    commands: usize,
    /// Bytes of a string `pad` each command overwrites first (0: none).
    pad_bytes: usize,
}

/// 40 commands in a pool far larger than they write.
const ROOMY: Shape = Shape {
    segments: 32,
    shards: 2,
    commands: 40,
    pad_bytes: 0,
};

/// 300 commands in a pool of ten segments and one shard, each after an overwrite of 6 KB that
/// is dead at once: segments fill faster than the hash's chunks are rewritten, so the
/// cleaner's victims hold live chunks (and owners) and it moves them while the cuts fall.
const CLEANED: Shape = Shape {
    segments: 10,
    shards: 1,
    commands: 300,
    pad_bytes: 6000,
};

/// One seed: the hash made, then `shape.commands` commands, a persist failing at a random
/// point for half the seeds; then a power cut keeping a random share of what was not
/// persisted (and for a third of the seeds a second one during the recovery), and the hash
/// read back from the image and the logs. Returns whether the cleaner
/// had moved records before the cut.
fn power_cut_after_hash_commands(durability: Durability, seed: u64, shape: Shape) -> bool {
    let mut rng = SmallRng::seed_from_u64(seed);
    // (Persists the make and the commands take: about 100, and 5 a command, under `sync`;
    // fewer under `interval`, where only a transaction's end persists.)
    let persists = if durability == Durability::Sync {
        20..20 + 7 * shape.commands as u64
    } else {
        2..2 + 3 * shape.commands as u64 / 2
    };
    let fail_from = rng.gen_bool(0.5).then(|| rng.gen_range(persists));
    let case = format!("{durability:?} seed {seed}, failing from {fail_from:?}");
    let logged = Logged::open(
        sized_config(durability, fail_from, shape),
        &format!("{seed}"),
    );
    let ctx = &logged.ctx;
    let mut session = RespSession::new(1);
    let Some(mut model) = make_hash(&mut session, ctx) else {
        return false; // The persist failed before the hash was whole: nothing to cut.
    };
    let mut unanswered = None;
    let pad = "p".repeat(shape.pad_bytes);
    for n in 1..=shape.commands {
        if shape.pad_bytes > 0 {
            // Refused once a persist failed, as the next command then is.
            run_args(&mut session, ctx, &["SET", "pad", &pad]);
        }
        let args = random_command(&mut rng, n);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply = run_args(&mut session, ctx, &argv);
        if reply.starts_with(b"-") {
            // Refused by the failed persist: it may be there whole, or not at all.
            unanswered = Some(args);
            break;
        }
        apply(&mut model, &args);
        // The server's tick, every 10 ms: it cleans while few segments are free (a failed
        // persist refuses it, as it refuses writes).
        let _ = ctx.engine.clean_ahead();
    }
    let stats = ctx.engine.stats();
    assert_eq!(stats.evicted_items, 0, "{case}: the hash fits");
    let keep_percent = [0, 50, 100][rng.gen_range(0..3)];
    // A third of the seeds lose the power again during the recovery.
    let undo_fail_from = rng.gen_ratio(1, 3).then(|| rng.gen_range(1..24));
    let (ctx, _) = logged.cut_and_recover(keep_percent, &mut rng, undo_fail_from);
    let found = read_hash(&ctx);
    let mut whole = model.clone();
    if let Some(args) = &unanswered {
        apply(&mut whole, args);
    }
    assert!(
        found == model || found == whole,
        "{case}, keeping {keep_percent}% (unanswered {unanswered:?}): {} fields found, {} \
         acknowledged, {} with the unanswered command",
        found.len(),
        model.len(),
        whole.len()
    );
    stats.cleaner_items_moved > 0
}

/// Large-hash commands (HSET of one and of three fields, HDEL, HPEXPIRE, HPERSIST) on a
/// simulated pool under `sync` and `interval`: after a power cut, the hash is exactly what the
/// answered commands made, the values and which fields expire, and a command a failed persist
/// cut is there whole or not at all.
#[test]
fn large_hash_commands_are_whole_across_power_cuts() {
    for durability in [Durability::Sync, Durability::Interval { ms: 10 }] {
        for seed in 0..48 {
            power_cut_after_hash_commands(durability, seed, ROOMY);
        }
    }
}

/// [`large_hash_commands_are_whole_across_power_cuts`] with 300 commands instead of 40, in a
/// pool of ten segments instead of 32: the cleaner moves the hash's chunks and owner (typed records, a family)
/// between the cuts, and what it moved must come back exactly as the commands left it.
#[test]
fn large_hash_commands_are_whole_across_power_cuts_while_the_cleaner_moves_them() {
    let mut cleaned = 0;
    for durability in [Durability::Sync, Durability::Interval { ms: 10 }] {
        for seed in 100..124 {
            cleaned += usize::from(power_cut_after_hash_commands(durability, seed, CLEANED));
        }
    }
    assert!(
        cleaned > 24,
        "the cleaner moved records in {cleaned} of 48 runs"
    );
}

/// The HSET a split test cuts: one new field whose value alone passes the split size, so the
/// chunk it lands in (whichever the hash's seed picks) splits.
fn splitting_hset() -> Vec<String> {
    let value = "y".repeat(strata_types::hash_chunks::CHUNK_SPLIT_BYTES);
    ["HSET", "h", "big", value.as_str()]
        .map(String::from)
        .into()
}

/// The chunks of the large hash `h` (its owner's parts).
fn chunks(ctx: &ServerContext) -> u32 {
    ctx.engine.get(b"h", |item| item.parts).expect("h exists")
}

/// What one cut of the splitting HSET gave: the persists taken before it and after it.
struct SplitCut {
    persists_before: u64,
    persists_after: u64,
    /// Whether a second cut fell in the recovery's undo of the HSET.
    undo_cut: bool,
}

/// Makes the hash, runs the splitting HSET with the pool's persists failing from `fail_from`
/// (never, for `None`: then the HSET must be answered and must split), cuts the power keeping
/// `keep_percent` of the unpersisted lines (which ones by the random seed `lines`), cuts it
/// again during the recovery when `undo_fail_from` says so ([`cut_the_recovery`]), and checks
/// the hash recovered: what the make made if the HSET was refused, or with the HSET whole;
/// then that it takes a write and finds every field after it (the split state recovered is
/// one the routing agrees with).
fn cut_a_split(
    durability: Durability,
    fail_from: Option<u64>,
    keep_percent: u32,
    lines: u64,
    undo_fail_from: Option<u64>,
) -> SplitCut {
    let case = format!(
        "{durability:?}, failing from {fail_from:?}, keeping {keep_percent}% (lines {lines}), \
         the recovery failing from {undo_fail_from:?}"
    );
    let name = format!(
        "split-{}-{keep_percent}-{lines}-{}",
        fail_from.unwrap_or(0),
        undo_fail_from.unwrap_or(0)
    );
    let logged = Logged::open(config(durability, fail_from), &name);
    let ctx = &logged.ctx;
    let mut session = RespSession::new(1);
    let made = make_hash(&mut session, ctx).unwrap_or_else(|| panic!("{case}: the make"));
    let chunks_before = chunks(ctx);
    let persists_before = logged.persist_calls();
    let hset = splitting_hset();
    let argv: Vec<&str> = hset.iter().map(String::as_str).collect();
    let answered = run_args(&mut session, ctx, &argv) == b":1\r\n";
    let persists_after = logged.persist_calls();
    if fail_from.is_none() {
        assert!(answered, "{case}: the HSET is answered");
        assert!(
            chunks(ctx) > chunks_before,
            "{case}: the HSET splits a chunk"
        );
    }
    let mut whole = made.clone();
    apply(&mut whole, &hset);
    let mut rng = SmallRng::seed_from_u64(lines << 8 | u64::from(keep_percent));
    let (ctx, undo_cut) = logged.cut_and_recover(keep_percent, &mut rng, undo_fail_from);
    let found = read_hash(&ctx);
    assert!(
        found == whole || (!answered && found == made),
        "{case} (answered: {answered}): {} fields found, {} made, {} with the HSET",
        found.len(),
        made.len(),
        whole.len()
    );
    let later = run(&mut RespSession::new(2), &ctx, "HSET h later v");
    assert_eq!(later, b":1\r\n", "{case}: a write after recovery");
    let mut after = found;
    after.insert("later".into(), ("v".into(), false));
    assert!(
        read_hash(&ctx) == after,
        "{case}: every field found after a write"
    );
    SplitCut {
        persists_before,
        persists_after,
        undo_cut,
    }
}

/// A session's engine on a simulated pool with its transaction logs, as a cut test runs it.
struct Logged {
    config: EngineConfig,
    logs: LogDir,
    ctx: ServerContext,
}

impl Logged {
    /// Opens `config`'s simulated pool and its logs (in a directory named after `name`).
    fn open(config: EngineConfig, name: &str) -> Logged {
        let logs = LogDir::new(name);
        let mut engine = Engine::open(config.clone()).expect("a simulated pool opens");
        engine.open_transaction_logs(&logs.pool()).expect("logs");
        let ctx = ServerContext::new(Arc::new(engine), Settings::default());
        Logged { config, logs, ctx }
    }

    /// The pool's persists so far.
    fn persist_calls(&self) -> u64 {
        simulation(&self.config).persist_calls()
    }

    /// Cuts the power now, keeping `keep_percent` of the lines not persisted (chosen by
    /// `rng`); when `undo_fail_from` says so, cuts it again during a first recovery
    /// ([`cut_the_recovery`]); then recovers with persists that all succeed. Returns the
    /// context over what is left, and whether the second cut fell in the log's undo.
    fn cut_and_recover(
        self,
        keep_percent: u32,
        rng: &mut SmallRng,
        undo_fail_from: Option<u64>,
    ) -> (ServerContext, bool) {
        let Logged { config, logs, ctx } = self;
        let image = ctx.engine.crash_image(simulation(&config), &mut |_| {
            rng.gen_range(0..100) < keep_percent
        });
        let crashed = LogDir::new("crashed");
        logs.copy_to(&crashed);
        drop(ctx);
        let (image, crashed, undo_cut) = match undo_fail_from {
            Some(from) => cut_the_recovery(&image, &config, &crashed, from, rng),
            None => (image, crashed, false),
        };
        let pool = Pool::open_image(&image, SimulatedPersistence::new()).expect("image opens");
        let mut engine = Engine::from_pool(pool, &config).expect("recovery succeeds");
        engine
            .open_transaction_logs(&crashed.pool())
            .unwrap_or_else(|e| panic!("the logs: {e}"));
        let ctx = ServerContext::new(Arc::new(engine), Settings::default());
        (ctx, undo_cut)
    }
}

/// A second power cut, during the recovery from `image` and `logs`: its persists fail from
/// the `from`-th on (the scan's marks, the transaction log's undo and its commit), and the
/// power goes then, keeping half the lines not persisted. Returns that image, the logs as it
/// left them, and whether the cut fell in the undo (the logs' open failed).
fn cut_the_recovery(
    image: &[u8],
    config: &EngineConfig,
    logs: &LogDir,
    from: u64,
    rng: &mut SmallRng,
) -> (Vec<u8>, LogDir, bool) {
    let simulation = SimulatedPersistence::failing_from(from);
    let again = LogDir::new(&format!("again-{from}"));
    logs.copy_to(&again);
    let opened = Pool::open_image(image, simulation.clone())
        .ok()
        .and_then(|pool| Engine::from_pool(pool, config).ok());
    let Some(mut engine) = opened else {
        return (image.to_vec(), again, false); // Cut before the undo: nothing it changed.
    };
    let undo_cut = engine.open_transaction_logs(&again.pool()).is_err();
    let image = engine.crash_image(&simulation, &mut |_| rng.gen_bool(0.5));
    (image, again, undo_cut)
}

/// A power cut aimed at a chunk split: an HSET that splits a large hash's chunk is cut at each
/// of its persists in turn (the split's new chunk, its owner, its old chunk, the transaction's
/// log and commit, the dead marks of what they replace), under `sync` and `interval`, keeping
/// 0, 50 (four ways) or 100% of the lines not persisted. The hash recovered is the one before
/// the HSET or the one with it, every field found, and it takes writes after.
#[test]
fn a_power_cut_at_each_step_of_a_chunk_split_leaves_the_hash_whole() {
    for durability in [Durability::Sync, Durability::Interval { ms: 10 }] {
        let clean = cut_a_split(durability, None, 100, 0, None);
        let steps = clean.persists_before + 1..=clean.persists_after;
        assert!(
            steps.clone().count() >= 2,
            "{durability:?}: persists {steps:?}"
        );
        for fail_from in steps {
            let keeps = [(0, 0), (50, 1), (50, 2), (50, 3), (50, 4), (100, 0)];
            for (keep_percent, lines) in keeps {
                let cut = cut_a_split(durability, Some(fail_from), keep_percent, lines, None);
                assert_eq!(
                    cut.persists_before, clean.persists_before,
                    "{durability:?}: the cut is aimed at the HSET's persists"
                );
            }
        }
    }
}

/// A persist that fails shows where an operator looks: INFO persistence says writes are
/// refused and why, and the metrics gauge turns 1; before it, both say 0.
#[test]
fn a_failed_persist_shows_in_info_and_in_the_metrics() {
    // The first persist after the open fails: the first SET under `sync` meets it.
    let (ctx, config) = (1..64)
        .find_map(|call| {
            let config = config(Durability::Sync, Some(call));
            let engine = Engine::open(config.clone()).ok()?;
            Some((
                ServerContext::new(Arc::new(engine), Settings::default()),
                config,
            ))
        })
        .expect("an open that persists fewer than 64 times");
    let metrics = crate::metrics::Metrics::new(1);
    let mut session = RespSession::new(1);
    let info = |session: &mut RespSession| {
        String::from_utf8(run(session, &ctx, "INFO persistence")).expect("text")
    };
    assert!(info(&mut session).contains("strata_writes_refused:0\r\n"));
    assert!(crate::metrics::render(&ctx, &metrics).contains("\nstrata_writes_refused 0\n"));
    let refused = run(&mut session, &ctx, "SET k v");
    assert!(
        refused.starts_with(b"-"),
        "{}",
        String::from_utf8_lossy(&refused)
    );
    assert!(simulation(&config).persist_calls() > 0);
    let text = info(&mut session);
    assert!(text.contains("strata_writes_refused:1\r\n"), "{text}");
    assert!(text.contains("strata_write_failure:"), "{text}");
    assert!(text.contains("injected fault"), "{text}");
    assert!(crate::metrics::render(&ctx, &metrics).contains("\nstrata_writes_refused 1\n"));
}

/// The split's cuts again, each followed by a second power cut during the recovery (at each of
/// its first persists in turn, keeping half of what was not persisted): the undo of the cut
/// HSET is itself cut, and the recovery after that still finds the hash before the HSET or
/// with it, whole.
#[test]
fn a_power_cut_during_the_undo_of_a_cut_split_leaves_the_hash_whole() {
    let mut undo_cuts = 0;
    for durability in [Durability::Sync, Durability::Interval { ms: 10 }] {
        let clean = cut_a_split(durability, None, 100, 0, None);
        for fail_from in clean.persists_before + 1..=clean.persists_after {
            for undo_fail_from in 1..=24 {
                let cut = cut_a_split(durability, Some(fail_from), 50, 1, Some(undo_fail_from));
                undo_cuts += u32::from(cut.undo_cut);
            }
        }
    }
    assert!(undo_cuts > 20, "cuts that fell in the undo: {undo_cuts}");
}

/// A power cut at each persist of `RENAME h h2` and of `COPY h h2` of a large hash (both keys
/// held, every chunk copied to the new name; RENAME drops the old family), under `sync` and
/// `interval`, keeping half the lines not persisted, then for each a second cut during the
/// recovery at one of its first persists. After RENAME the hash is under exactly one of the
/// names, whole, and under the new one if RENAME was answered; after COPY it is under `h`,
/// whole, and under `h2` whole or not at all (whole if COPY was answered). Fails if the
/// recovery skips the transaction log's undo (checked).
#[test]
fn a_power_cut_at_each_step_of_a_large_rename_or_copy_leaves_the_hash_whole() {
    for command in ["RENAME", "COPY"] {
        for durability in [Durability::Sync, Durability::Interval { ms: 10 }] {
            let clean = cut_a_rename(command, durability, None, None);
            let steps = clean.persists_before + 1..=clean.persists_after;
            assert!(steps.clone().count() > 1, "{command} {durability:?}");
            for fail_from in steps {
                for undo_fail_from in [None, Some(3), Some(5), Some(8), Some(12)] {
                    cut_a_rename(command, durability, Some(fail_from), undo_fail_from);
                }
            }
        }
    }
}

/// One cut of [`a_power_cut_at_each_step_of_a_large_rename_or_copy_leaves_the_hash_whole`].
fn cut_a_rename(
    command: &str,
    durability: Durability,
    fail_from: Option<u64>,
    undo_fail_from: Option<u64>,
) -> SplitCut {
    let case =
        format!("{durability:?} {command} failing from {fail_from:?}, then {undo_fail_from:?}");
    let name = format!(
        "{command}-{}-{}",
        fail_from.unwrap_or(0),
        undo_fail_from.unwrap_or(0)
    );
    let logged = Logged::open(config(durability, fail_from), &name);
    let ctx = &logged.ctx;
    let mut session = RespSession::new(1);
    let made = make_hash(&mut session, ctx).unwrap_or_else(|| panic!("{case}: the make"));
    let persists_before = logged.persist_calls();
    let reply = run_args(&mut session, ctx, &[command, "h", "h2"]);
    let answered = reply == b"+OK\r\n" || reply == b":1\r\n";
    let persists_after = logged.persist_calls();
    assert!(answered || fail_from.is_some(), "{case}: answered");
    let mut rng = SmallRng::seed_from_u64(persists_before ^ fail_from.unwrap_or(0));
    let (ctx, _) = logged.cut_and_recover(50, &mut rng, undo_fail_from);
    let (old, new) = (read_hash_at(&ctx, "h"), read_hash_at(&ctx, "h2"));
    let (done, not_done) = if command == "COPY" {
        (old == made && new == made, old == made && new.is_empty())
    } else {
        (old.is_empty() && new == made, new.is_empty() && old == made)
    };
    assert!(
        done || (!answered && not_done),
        "{case} (answered: {answered}): {} fields under h, {} under h2, {} made",
        old.len(),
        new.len(),
        made.len()
    );
    SplitCut {
        persists_before,
        persists_after,
        undo_cut: false,
    }
}

/// A power cut at each persist of an EXEC over two large hashes and a string: `HSET h big`
/// and `HSET g big` (each value splits its chunk) and `DEL s`, under `sync` and `interval`,
/// keeping half the lines not persisted, each also cut again during the recovery (none, or
/// from its 3rd, 5th, 8th or 12th persist). The three keys are then all as before the EXEC or
/// all as after it, and as after it once EXEC was answered.
#[test]
fn a_power_cut_at_each_step_of_an_exec_over_large_hashes_is_all_or_nothing() {
    for durability in [Durability::Sync, Durability::Interval { ms: 10 }] {
        let clean = cut_an_exec(durability, None, None);
        let steps = clean.persists_before + 1..=clean.persists_after;
        assert!(steps.clone().count() > 2, "{durability:?}");
        for fail_from in steps {
            for undo_fail_from in [None, Some(3), Some(5), Some(8), Some(12)] {
                cut_an_exec(durability, Some(fail_from), undo_fail_from);
            }
        }
    }
}

/// The keys an EXEC test reads back: `h`, `g` and whether `s` exists.
type ExecState = (Model, Model, bool);

/// One cut of [`a_power_cut_at_each_step_of_an_exec_over_large_hashes_is_all_or_nothing`].
fn cut_an_exec(
    durability: Durability,
    fail_from: Option<u64>,
    undo_fail_from: Option<u64>,
) -> SplitCut {
    let case = format!("{durability:?} EXEC failing from {fail_from:?}, then {undo_fail_from:?}");
    let name = format!(
        "exec-{}-{}",
        fail_from.unwrap_or(0),
        undo_fail_from.unwrap_or(0)
    );
    let logged = Logged::open(config(durability, fail_from), &name);
    let ctx = &logged.ctx;
    let mut session = RespSession::new(1);
    let h = make_hash_at(&mut session, ctx, "h").unwrap_or_else(|| panic!("{case}: h"));
    let g = make_hash_at(&mut session, ctx, "g").unwrap_or_else(|| panic!("{case}: g"));
    assert_eq!(run(&mut session, ctx, "SET s v"), b"+OK\r\n", "{case}");
    let before: ExecState = (h, g, true);
    let hset = splitting_hset();
    let mut after = before.clone();
    apply(&mut after.0, &hset);
    apply(&mut after.1, &hset);
    after.2 = false;
    let persists_before = logged.persist_calls();
    assert_eq!(run(&mut session, ctx, "MULTI"), b"+OK\r\n", "{case}");
    for key in ["h", "g"] {
        let argv = ["HSET", key, hset[2].as_str(), hset[3].as_str()];
        assert_eq!(run_args(&mut session, ctx, &argv), b"+QUEUED\r\n", "{case}");
    }
    assert_eq!(run(&mut session, ctx, "DEL s"), b"+QUEUED\r\n", "{case}");
    let answered = run(&mut session, ctx, "EXEC") == b"*3\r\n:1\r\n:1\r\n:1\r\n";
    let persists_after = logged.persist_calls();
    assert!(answered || fail_from.is_some(), "{case}: EXEC answered");
    let mut rng = SmallRng::seed_from_u64(persists_before ^ fail_from.unwrap_or(0));
    let (ctx, _) = logged.cut_and_recover(50, &mut rng, undo_fail_from);
    let exists = run(&mut RespSession::new(2), &ctx, "EXISTS s") == b":1\r\n";
    let found: ExecState = (read_hash_at(&ctx, "h"), read_hash_at(&ctx, "g"), exists);
    assert!(
        found == after || (!answered && found == before),
        "{case} (answered: {answered}): h {} fields, g {}, s {exists}",
        found.0.len(),
        found.1.len()
    );
    SplitCut {
        persists_before,
        persists_after,
        undo_cut: false,
    }
}
