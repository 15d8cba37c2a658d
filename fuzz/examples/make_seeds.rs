//! Writes the seed corpora of the fuzz targets into `fuzz/seeds/<target>/`:
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --example make_seeds
//! ```
//!
//! Protocol seeds are requests written out below, one pipeline per file: each command, its
//! refusals, data blocks, noreply, meta flags, quoting. Pool seeds are real pools: the engine
//! writes items of every record form (TTL, client flags, explicit CAS, a wide key, empty values,
//! deletes, overwrites, eviction) into a pool of the harness's tiny geometry on `/dev/shm`, then
//! stops cleanly or "crashes" (drops the engine without closing it), and the pool file, its
//! sidecar and its index directory are packed into one fuzzer input with `PoolInput::encode`.
//! The pool file is stored without its trailing zeros (the harness pads it back, `OPT_PAD`).
//!
//! Flash seeds are a medium the engine wrote: a tier of small regions under a small memory,
//! filled past both with strings of several sizes (some with a TTL), overwrites, deletes and
//! items of several records (bundles), so regions were written, reclaimed and written again;
//! then a clean close. Each is stored sparse (`strata_fuzz::flash`), as it is
//! (`*-unchanged`: it must check sound) and with checksums fixed.
//!
//! Running it again rewrites every seed (`-- TARGET...`: only those targets'); pool and flash
//! seeds differ from run to run only in random ids and creation times (the pools' boot id is a
//! fixed one no machine has).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata_engine::{
    Change, Durability, Engine, EngineConfig, EvictionPolicy, Expiry, FlashAdmission, FlashConfig,
    FlashMedium, IndexPlacement, Kind, ManualClock, PoolLocation,
};
use strata_fuzz::pool::{
    pack_sparse, PoolInput, TableFile, CLOCK_START_MS, OPT_DURABILITY_SHIFT, OPT_FIX_CHECKSUMS,
    OPT_INDEX_IN_POOL, OPT_LATE_CLOCK, OPT_PAD, OPT_SAME_BOOT, OPT_SPARSE, SEGMENT_COUNT,
    SEGMENT_SIZE_BYTES,
};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    // Targets named on the command line only, else every one.
    let only: Vec<String> = std::env::args().skip(1).collect();
    let wanted = |target: &str| only.is_empty() || only.iter().any(|name| name == target);
    let makers: [(&str, SeedMaker); 4] = [
        ("memcache_parse", memcache_seeds),
        ("resp_parse", resp_seeds),
        ("pool_open", pool_seeds),
        ("flash_verify", flash_seeds),
    ];
    for (target, make) in makers {
        if wanted(target) {
            write_all(&root.join(target), &make());
        }
    }
}

/// A target's seeds: file names and contents.
type Seeds = Vec<(String, Vec<u8>)>;

/// What writes a target's seeds.
type SeedMaker = fn() -> Seeds;

/// Replaces the files of `dir` with `seeds`.
fn write_all(dir: &Path, seeds: &[(String, Vec<u8>)]) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("create the seed directory");
    for (name, bytes) in seeds {
        std::fs::write(dir.join(name), bytes).expect("write a seed");
    }
    let total: usize = seeds.iter().map(|(_, bytes)| bytes.len()).sum();
    println!("{}: {} seeds, {total} bytes", dir.display(), seeds.len());
}

fn named(seeds: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
    seeds
        .iter()
        .map(|(name, bytes)| (name.to_string(), bytes.to_vec()))
        .collect()
}

fn memcache_seeds() -> Vec<(String, Vec<u8>)> {
    named(&[
        ("get", b"get key\r\n"),
        ("get-multi", b"get a b c\r\ngets a  b\r\n"),
        ("gat", b"gat 10 a b\r\ngats -1 a\r\ngat 5\r\n"),
        ("set", b"set k 0 0 5\r\nhello\r\n"),
        ("set-noreply", b"set k 7 100 3 noreply\r\nabc\r\n"),
        ("set-bad-chunk", b"set k 0 0 2\r\nabcd\r\nget k\r\n"),
        ("set-too-large", b"set k 0 0 2000000\r\nget k\r\n"),
        ("set-bad-format", b"set k x 0 1\r\nx\r\nset k 0 0 -1\r\n"),
        (
            "add-replace",
            b"add k 1 2 1\r\nx\r\nreplace k 0 0 0\r\n\r\n",
        ),
        (
            "append-prepend",
            b"append k 0 0 1\r\na\r\nprepend k 0 0 1\nb\r\n",
        ),
        ("cas", b"cas k 0 0 1 42\r\nx\r\ncas k 0 0 1 x\r\nx\r\n"),
        (
            "delete",
            b"delete k\r\ndelete k 0\r\ndelete k noreply\r\ndelete\r\n",
        ),
        (
            "incr-decr",
            b"incr k 1\r\ndecr k 18446744073709551615\r\nincr k -1\r\n",
        ),
        ("touch", b"touch k 10\r\ntouch k x noreply\r\n"),
        (
            "admin",
            b"flush_all\r\nflush_all 10 noreply\r\nversion\r\nverbosity 1\r\n",
        ),
        (
            "stats-shutdown-quit",
            b"stats\r\nstats slabs\r\nshutdown graceful\r\nquit\r\n",
        ),
        ("mg", b"mg k v c f t s k h l O123 q T30 N30 R10\r\n"),
        ("mg-base64", b"mg YWJj b v\r\nmg YQ== b k\r\nmg !!!! b\r\n"),
        ("mg-dup-flag", b"mg k v v\r\nmg k \x80\r\nmg k Z\r\n"),
        ("ms", b"ms k 3 T10 F5 MA I c\r\nabc\r\nms k 1 ME\r\nx\r\n"),
        (
            "ms-modes",
            b"ms k 1 MS\r\na\r\nms k 1 MP\r\nb\r\nms k 1 MR q\r\nc\r\n",
        ),
        (
            "ms-bad",
            b"ms k x\r\nms k 2 MX\r\nab\r\nms k 2000000 T1\r\n",
        ),
        ("md-ma", b"md k q C5\r\nma k MD D3 J7 N10\r\nma k M+ E9\r\n"),
        ("mn-me", b"mn\r\nme k\r\nme YQ== b\r\n"),
        (
            "meta-too-many",
            b"mg k a b c d e f g h i j k l m n o p q r s t u v\r\n",
        ),
        (
            "opaque-long",
            b"mg k Oaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
        ),
        ("errors", b"GET k\r\n\r\nfoo\r\n  \r\nget\r\n"),
        ("bare-newlines", b"get k\nset k 0 0 1\nx\r\nversion\n"),
        ("incomplete", b"set k 0 0 10\r\nabc"),
        (
            "long-key",
            b"get kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\r\n",
        ),
        ("control-in-key", b"get a\x01b\r\nset a\tb 0 0 1\r\nx\r\n"),
        ("long-line", &[b'x'; 3000]),
    ])
}

fn resp_seeds() -> Vec<(String, Vec<u8>)> {
    named(&[
        ("get", b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n"),
        ("set", b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n"),
        (
            "set-ex",
            b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nEX\r\n$2\r\n10\r\n",
        ),
        (
            "pipeline",
            b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$2\r\nhi\r\n*1\r\n$4\r\nQUIT\r\n",
        ),
        (
            "mget",
            b"*4\r\n$4\r\nMGET\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n",
        ),
        ("empty-bulk", b"*2\r\n$4\r\nECHO\r\n$0\r\n\r\n"),
        ("zero-count", b"*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n"),
        ("unchecked-tail", b"*1\r\n$4\r\nPINGxy*1\r\n$4\r\nPING\r\n"),
        ("bad-count", b"*x\r\n"),
        ("big-count", b"*2147483648\r\n"),
        ("bad-bulk", b"*1\r\n$-1\r\n"),
        ("expected-dollar", b"*1\r\n+PING\r\n"),
        ("expected-dollar-cr", b"*1\r\n\r\n"),
        ("huge-bulk", b"*1\r\n$536870913\r\n"),
        ("auth-limits", b"*11\r\n$1\r\na\r\n*1\r\n$16385\r\n"),
        ("incomplete-bulk", b"*2\r\n$3\r\nGET\r\n$10\r\nabc"),
        ("inline", b"PING\r\nSET k v\r\nGET k\n"),
        ("inline-quotes", b"SET k \"a b\\x41\\n\" 'c\\'d'\r\n"),
        ("inline-unbalanced", b"SET k \"abc\r\n"),
        ("inline-quote-no-space", b"SET k \"a\"b\r\n"),
        ("inline-empty", b"\r\n\n   \r\nPING\r\n"),
        ("inline-nul", b"PI\0NG\r\n"),
        ("inline-spaces", b"  SET\tk \x0bv\x0c  \r\n"),
        ("hello", b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"),
        ("auth", b"*3\r\n$4\r\nAUTH\r\n$4\r\nuser\r\n$4\r\npass\r\n"),
        (
            "scan",
            b"*6\r\n$4\r\nSCAN\r\n$1\r\n0\r\n$5\r\nMATCH\r\n$2\r\nk*\r\n\
              $5\r\nCOUNT\r\n$2\r\n10\r\n",
        ),
        (
            "long-count-line",
            b"*00000000000000000000001\r\n$4\r\nPING\r\n",
        ),
        ("long-inline", &[b'a'; 100]),
    ])
}

/// One scenario of the pool seeds: how the pool is opened, written and left.
struct Scenario {
    name: &'static str,
    index_in_pool: bool,
    shard_count: usize,
    durability: Durability,
    group_commit: bool,
    /// Stop cleanly (sidecar or index files bound to the clean state) or crash.
    close: bool,
    /// Items to write: a mixed set, or enough small ones to evict.
    fill: Fill,
    /// Options byte of the seed.
    options: u8,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fill {
    Nothing,
    Mixed,
    Evicting,
}

fn pool_seeds() -> Vec<(String, Vec<u8>)> {
    // Most seeds are sparse with checksums fixed; one keeps the raw file and its checksums.
    const FIX: u8 = OPT_FIX_CHECKSUMS | OPT_PAD | OPT_SPARSE;
    let sync_group_commit = (3 << OPT_DURABILITY_SHIFT) | FIX | OPT_SAME_BOOT;
    let interval = (1 << OPT_DURABILITY_SHIFT) | FIX;
    let scenarios = [
        scenario("crash-dram", false, Fill::Mixed, false, FIX | OPT_SAME_BOOT),
        scenario(
            "crash-dram-raw",
            false,
            Fill::Mixed,
            false,
            OPT_PAD | OPT_SAME_BOOT,
        ),
        scenario("crash-dram-other-boot", false, Fill::Mixed, false, FIX),
        scenario("clean-dram", false, Fill::Mixed, true, FIX),
        scenario(
            "clean-dram-late",
            false,
            Fill::Mixed,
            true,
            FIX | OPT_LATE_CLOCK,
        ),
        scenario(
            "crash-index",
            true,
            Fill::Mixed,
            false,
            FIX | OPT_INDEX_IN_POOL | OPT_SAME_BOOT,
        ),
        scenario(
            "clean-index",
            true,
            Fill::Mixed,
            true,
            FIX | OPT_INDEX_IN_POOL,
        ),
        scenario(
            "crash-evicted",
            false,
            Fill::Evicting,
            false,
            FIX | OPT_SAME_BOOT,
        ),
        scenario("clean-evicted", false, Fill::Evicting, true, FIX),
        scenario("clean-empty", false, Fill::Nothing, true, FIX),
        Scenario {
            durability: Durability::Sync,
            group_commit: true,
            ..scenario("crash-sync", false, Fill::Mixed, false, sync_group_commit)
        },
        Scenario {
            durability: Durability::Interval { ms: 1000 },
            ..scenario(
                "crash-interval-other-boot",
                false,
                Fill::Mixed,
                false,
                interval,
            )
        },
        Scenario {
            shard_count: 1,
            ..scenario(
                "clean-one-shard-index",
                true,
                Fill::Mixed,
                true,
                FIX | OPT_INDEX_IN_POOL,
            )
        },
    ];
    let mut seeds: Vec<(String, Vec<u8>)> = scenarios.iter().map(pool_seed).collect();
    // An empty pool file: the open creates a pool.
    seeds.push(("created".to_string(), vec![0]));
    seeds
}

fn scenario(
    name: &'static str,
    index_in_pool: bool,
    fill: Fill,
    close: bool,
    options: u8,
) -> Scenario {
    Scenario {
        name,
        index_in_pool,
        shard_count: 2,
        durability: Durability::None,
        group_commit: false,
        close,
        fill,
        options,
    }
}

/// Runs one scenario in a scratch directory and packs what it left.
fn pool_seed(scenario: &Scenario) -> (String, Vec<u8>) {
    let dir = std::env::temp_dir().join(format!("strata-seeds-{}", std::process::id()));
    let dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm").join(dir.file_name().expect("a name"))
    } else {
        dir
    };
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the scratch directory");
    let pool_path = dir.join("pool");
    let engine = Engine::open(EngineConfig {
        memory_bytes: SEGMENT_SIZE_BYTES * SEGMENT_COUNT,
        segment_size_bytes: SEGMENT_SIZE_BYTES,
        pool: PoolLocation::File(pool_path.clone()),
        shard_count: scenario.shard_count,
        durability: scenario.durability,
        group_commit: scenario.group_commit,
        eviction: EvictionPolicy::Merge,
        index_placement: if scenario.index_in_pool {
            IndexPlacement::Pool
        } else {
            IndexPlacement::Dram
        },
        clock: Arc::new(ManualClock::new(CLOCK_START_MS)),
        ..EngineConfig::default()
    })
    .expect("open a seed pool");
    match scenario.fill {
        Fill::Nothing => {}
        Fill::Mixed => write_mixed(&engine),
        Fill::Evicting => write_evicting(&engine),
    }
    if scenario.group_commit {
        engine.commit().expect("commit");
    }
    engine.check_integrity().expect("a seed pool is sound");
    if scenario.close {
        engine.close().expect("close a seed pool");
    }
    drop(engine);
    let seed = pack(&pool_path, scenario.options);
    std::fs::remove_dir_all(&dir).expect("remove the scratch directory");
    (scenario.name.to_string(), seed)
}

/// Items of every record form, a delete and overwrites.
fn write_mixed(engine: &Engine) {
    let in_an_hour = Expiry::AtMs(CLOCK_START_MS + 3_600_000);
    for i in 0..24u32 {
        let key = format!("key:{i:04}");
        let expiry = if i % 3 == 0 {
            in_an_hour
        } else {
            Expiry::Never
        };
        let value = format!("value {i} ").repeat(1 + i as usize % 4);
        engine
            .set(key.as_bytes(), value.as_bytes(), i % 2 * 7, expiry)
            .expect("set");
    }
    engine
        .set(b"empty", b"", 0, Expiry::Never)
        .expect("set an empty value");
    let wide_key = vec![b'w'; 300];
    engine
        .set(&wide_key, b"a key longer than 255 bytes", 0, Expiry::Never)
        .expect("set wide");
    engine
        .modify(b"chosen-cas", |_, buffer| {
            buffer.extend_from_slice(b"with an explicit CAS");
            Change::WriteWithCas {
                client_flags: 3,
                expiry: in_an_hour,
                cas: 0xDEAD_BEEF,
            }
        })
        .expect("write with a CAS");
    engine.delete(b"key:0005", None).expect("delete");
    engine
        .set(b"key:0006", b"overwritten", 0, Expiry::Never)
        .expect("overwrite");
    engine
        .set(b"key:0007", b"overwritten", 0, in_an_hour)
        .expect("overwrite");
}

/// Enough items to fill the pool several times over, so segments are merged and evicted.
fn write_evicting(engine: &Engine) {
    for i in 0..1500u32 {
        let key = format!("evict:{i:05}");
        engine
            .set(key.as_bytes(), &[b'v'; 40], 0, Expiry::Never)
            .expect("set");
        if i % 10 == 0 {
            let _ = engine.get(format!("evict:{:05}", i / 2).as_bytes(), |_| ());
        }
    }
}

/// Packs the pool at `pool_path`, its sidecar and index directory into one input.
fn pack(pool_path: &Path, options: u8) -> Vec<u8> {
    let with = |suffix: &str| {
        let mut name = pool_path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    let mut pool = std::fs::read(pool_path).expect("read the pool");
    // A boot id no machine has, so that a seed reads as written before a reboot wherever it is
    // replayed, unless its options stamp the current boot's (`OPT_SAME_BOOT`).
    pool[144..160].fill(0x5A);
    let state_crc = crc32c::crc32c(&pool[128..160]);
    pool[160..164].copy_from_slice(&state_crc.to_le_bytes());
    if options & OPT_SPARSE != 0 {
        pool = pack_sparse(&pool);
    } else if options & OPT_PAD != 0 {
        let used = pool
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |last| last + 1);
        pool.truncate(used);
    }
    let sidecar = std::fs::read(with(".sidecar")).ok();
    let index_dir = with(".index");
    let control = std::fs::read(index_dir.join("control")).ok();
    let mut tables: Vec<(u16, u8, u8, Vec<u8>)> = Vec::new();
    for entry in std::fs::read_dir(&index_dir).into_iter().flatten() {
        let entry = entry.expect("list the index directory");
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some((shard, kind, generation)) = table_name(&name) {
            tables.push((
                shard,
                kind,
                generation,
                std::fs::read(entry.path()).expect("read"),
            ));
        }
    }
    tables.sort();
    let input = PoolInput {
        options,
        pool: &pool,
        sidecar: sidecar.as_deref(),
        control: control.as_deref(),
        tables: tables
            .iter()
            .map(|(shard, kind, generation, bytes)| TableFile {
                shard: *shard,
                kind: *kind,
                generation: *generation,
                bytes,
            })
            .collect(),
    };
    input.encode()
}

/// Parses `sNNNN-pG` / `sNNNN-oG`.
fn table_name(name: &str) -> Option<(u16, u8, u8)> {
    let (shard, rest) = name.strip_prefix('s')?.split_once('-')?;
    let kind = *rest.as_bytes().first()?;
    let generation = rest[1..].parse().ok()?;
    (kind == b'p' || kind == b'o').then_some((shard.parse().ok()?, kind, generation))
}

/// Media the engine wrote (module docs): one filled with strings, one with strings and items of
/// several records, each as it is and with checksums fixed.
fn flash_seeds() -> Vec<(String, Vec<u8>)> {
    use strata_fuzz::flash::{OPT_FIX_CHECKSUMS, OPT_SPARSE};
    let mut seeds = Vec::new();
    for (name, families) in [("strings", false), ("families", true)] {
        let medium = flash_medium(families);
        let packed = pack_sparse(&medium);
        let unchanged = [&[OPT_SPARSE][..], &packed].concat();
        strata_fuzz::flash::check_sound(&unchanged);
        seeds.push((format!("{name}-unchanged"), unchanged));
        let fixed = [&[OPT_FIX_CHECKSUMS | OPT_SPARSE][..], &packed].concat();
        seeds.push((format!("{name}-checksums-fixed"), fixed));
    }
    seeds
}

/// Region size of the flash seeds (it must hold the largest item, `value_len_max`).
const FLASH_REGION_BYTES: u64 = 16 << 10;
/// Regions of a flash seed's medium: the fewest the tier takes, and two more.
const FLASH_REGIONS: u64 = 8;

/// The bytes of a medium the engine filled and closed (see [`flash_seeds`]).
fn flash_medium(families: bool) -> Vec<u8> {
    let path = PathBuf::from(if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    })
    .join(format!("strata-seeds-flash-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let engine = Engine::open(EngineConfig {
        memory_bytes: SEGMENT_SIZE_BYTES * 16,
        segment_size_bytes: SEGMENT_SIZE_BYTES,
        shard_count: 2,
        value_len_max: 3000,
        clock: Arc::new(ManualClock::new(CLOCK_START_MS)),
        flash: Some(FlashConfig {
            medium: FlashMedium::File {
                path: path.clone(),
                size_bytes: 4096 + FLASH_REGIONS * FLASH_REGION_BYTES,
            },
            region_size_bytes: FLASH_REGION_BYTES,
            admission: FlashAdmission::All,
            write_bytes_per_sec_max: 0,
            read_delay_for_tests: std::time::Duration::ZERO,
        }),
        ..EngineConfig::default()
    })
    .expect("open a seed engine with a flash tier");
    let in_an_hour = Expiry::AtMs(CLOCK_START_MS + 3_600_000);
    for i in 0..400u32 {
        let key = format!("f:{:04}", i % 300);
        // A tag, then zeros: the sparse seed keeps the headers and little of the values.
        let mut value = format!("v{i}").into_bytes();
        value.resize([12, 200, 700, 1500][(i % 4) as usize], 0);
        let expiry = if i % 5 == 0 {
            in_an_hour
        } else {
            Expiry::Never
        };
        engine
            .set(key.as_bytes(), &value, i, expiry)
            .expect("a seed write");
        if i % 7 == 0 {
            let _ = engine.delete(format!("f:{:04}", i / 2).as_bytes(), None);
        }
        if families && i % 40 == 0 {
            write_seed_family(&engine, i);
        }
        wait_for_flash_writes(&engine);
    }
    engine.close().expect("close the seed engine");
    drop(engine);
    let medium = std::fs::read(&path).expect("read the seed medium");
    std::fs::remove_file(&path).expect("remove the seed medium");
    medium
}

/// An owner and three parts (demoted whole, as a bundle).
fn write_seed_family(engine: &Engine, i: u32) {
    let owner = format!("family:{i:04}");
    let txn = engine
        .transaction(&[owner.as_bytes()], &[])
        .expect("a seed transaction");
    for part in 0..3 {
        let mut value = format!("{owner}/{part}/").into_bytes();
        value.resize(300, 0);
        txn.write_part(owner.as_bytes(), part, &value)
            .expect("a seed part");
    }
    txn.write_owner(owner.as_bytes(), b"owner", Kind::Hash, Expiry::Never, 3)
        .expect("a seed owner");
    txn.finish().expect("finish a seed transaction");
}

/// Waits until the flash thread has written what memory sealed for it.
fn wait_for_flash_writes(engine: &Engine) {
    let began = std::time::Instant::now();
    while engine
        .stats()
        .flash
        .is_some_and(|flash| flash.regions_queued > 0)
    {
        assert!(
            began.elapsed().as_secs() < 10,
            "the flash writes do not drain"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
