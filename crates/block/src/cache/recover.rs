//! Opening a cache on a pool's slots after a restart: every shard takes in the lines its valid
//! entries name (the newest version of each line wins), and a file pool's pages are mapped
//! ahead of the requests.

use super::*;

impl Cache {
    /// A cache over `slots` (one per shard), taking in the lines their entries name (pool
    /// slots): of the valid entries naming one line the highest version wins and the others
    /// are cleared; lines at or past `lines_max` are cleared, and clean lines too unless
    /// `keep_clean`. The caller persists the pool before (what a crash left is what is read)
    /// and after (the clears are durable before a winner's entry changes).
    pub fn from_slots(
        line_bytes: usize,
        promote_after: u32,
        slots: Vec<Slots>,
        pool: Option<Pool>,
        lines_max: u64,
        keep_clean: bool,
    ) -> Cache {
        assert_eq!(slots.len(), SHARDS, "one slot set per shard");
        let persistent = pool.is_some();
        let now = Instant::now();
        let mut tally = Recovered::default();
        let shards = slots
            .into_iter()
            .map(|slots| {
                let shard =
                    recover_shard(slots, line_bytes, lines_max, keep_clean, now, &mut tally);
                Mutex::new(shard)
            })
            .collect();
        let Recovered {
            lines: recovered_lines,
            dirty_lines: recovered_dirty_lines,
            version_max,
            dirty_slots_failed,
            capacity_lines,
        } = tally;
        if dirty_slots_failed > 0 {
            tracing::warn!(
                slots = dirty_slots_failed,
                "dirty slots whose bytes fail their checksum were dropped: each a write torn by \
                 a crash (never acknowledged) or damage to the pool; their lines fall back to an \
                 older version in the pool or to the store"
            );
        }
        // A file pool's pages mapped ahead of the requests (each first touch would fault),
        // from a thread of the lowest priority.
        let populating = pool.as_ref().and_then(start_populating);
        Cache {
            populating: Mutex::new(populating),
            capacity_lines,
            dirty_slots_failed,
            line_bytes,
            pool: Mutex::new(pool),
            persistent,
            recovered_lines,
            recovered_dirty_lines,
            promote_after: promote_after.max(1),
            shards,
            next_version: AtomicU64::new(version_max + 1),
            unsettled: AtomicBool::new(false),
            settling: Mutex::new(()),
            cleaning: Mutex::new(()),
            counters: CacheCounters::default(),
        }
    }
}

/// What `Cache::from_slots` found in the slots of every shard.
#[derive(Default)]
struct Recovered {
    lines: u64,
    dirty_lines: u64,
    version_max: u64,
    dirty_slots_failed: u64,
    capacity_lines: usize,
}

/// A shard over `slots`, taking in the lines their entries name (see `Cache::from_slots`),
/// counted in `tally`.
fn recover_shard(
    mut slots: Slots,
    line_bytes: usize,
    lines_max: u64,
    keep_clean: bool,
    now: Instant,
    tally: &mut Recovered,
) -> Shard {
    let count = slots.count(line_bytes);
    tally.capacity_lines += count;
    let mut shard = Shard {
        lines: vec![EMPTY; count],
        versions: vec![0; count],
        states: vec![SlotState::Empty; count],
        referenced: vec![false; count],
        index: HashMap::new(),
        hand: 0,
        generation: 0,
        writing: HashMap::new(),
        misses: HashMap::new(),
        dirty: BTreeMap::new(),
        dirty_from: HashMap::new(),
        older: HashMap::new(),
        superseded: Vec::new(),
        slots: Slots::Dram { bytes: Vec::new() },
    };
    let mut winners: HashMap<u64, (usize, Entry)> = HashMap::new();
    let (valid, dirty_failed) = slots.valid_entries(line_bytes);
    tally.dirty_slots_failed += dirty_failed;
    for (slot, entry) in valid {
        tally.version_max = tally.version_max.max(entry.version);
        if entry.line >= lines_max {
            slots.clear(slot);
            continue;
        }
        match winners.get(&entry.line) {
            Some(&(other, best)) if best.version >= entry.version => {
                let _ = other;
                slots.clear(slot);
            }
            Some(&(other, _)) => {
                slots.clear(other);
                winners.insert(entry.line, (slot, entry));
            }
            None => {
                winners.insert(entry.line, (slot, entry));
            }
        }
    }
    for (line, (slot, entry)) in winners {
        if !entry.dirty && !keep_clean {
            slots.clear(slot);
            continue;
        }
        shard.lines[slot] = line;
        shard.versions[slot] = entry.version;
        shard.index.insert(line, slot);
        if entry.dirty {
            shard.states[slot] = SlotState::Dirty;
            shard.dirty.insert((entry.version, line), now);
            shard.dirty_from.insert(line, entry.version);
            tally.dirty_lines += 1;
        } else {
            shard.states[slot] = SlotState::Clean;
        }
        tally.lines += 1;
    }
    shard.slots = slots;
    shard
}

/// Starts mapping a file pool's pages ahead of the requests (each first touch would fault),
/// from a thread of the lowest priority; `None` for a pool with nothing to map.
fn start_populating(pool: &Pool) -> Option<(Arc<AtomicBool>, std::thread::JoinHandle<()>)> {
    let populator = pool.populator()?;
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    std::thread::Builder::new()
        .name("strata-block-populate".into())
        .spawn(move || populator.run(&stopping))
        .ok()
        .map(|thread| (stop, thread))
}
