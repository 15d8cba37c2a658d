//! The flash tier's unit tests.

use super::*;
use crate::record::{self, RecordMeta};
use std::collections::HashMap;
use strata_pool::testing::{Faults, MemoryMedium, SimulatedMedium};

const REGION: u64 = 64 << 10;

fn tier(regions: u64) -> FlashTier {
    tier_reading_in(regions, 4096)
}

/// A tier whose medium reads in `read_align_bytes` pieces (its blocks are 4 KiB).
fn tier_reading_in(regions: u64, read_align_bytes: usize) -> FlashTier {
    let len = BLOCK_SIZE_BYTES as u64 + regions * REGION;
    let memory = MemoryMedium::new(len as usize, 4096).reading_in(read_align_bytes);
    let medium = SimulatedMedium::new(memory, Faults::default());
    FlashTier::open(Arc::new(medium), 7, REGION, 8 << 10, false)
        .unwrap()
        .0
}

/// A stand-in for the engine's key hash in the region directory (tests map it back).
fn record_hash(record: &[u8]) -> u64 {
    u64::from(crc32c::crc32c(record)) | ((record.len() as u64) << 32)
}

fn encode(key: &str, value_len: usize) -> Vec<u8> {
    encode_filled(key, value_len, b'v')
}

fn encode_filled(key: &str, value_len: usize, fill: u8) -> Vec<u8> {
    let meta = RecordMeta {
        cas: Some(42),
        ..RecordMeta::default()
    };
    let value = vec![fill; value_len];
    let mut out = vec![0; record::record_size(key.len(), value_len, &meta)];
    record::write(&mut out, key.as_bytes(), &value, &meta);
    out
}

fn read_key(tier: &FlashTier, location: u64) -> Option<Vec<u8>> {
    let mut out = AlignedBuf::zeroed(4096, 4096);
    let range = tier.read(location, &mut out)?;
    match record::read(&out[range]) {
        record::Scan::Record(view) => Some(view.key.to_vec()),
        _ => None,
    }
}

fn write_all(tier: &FlashTier) {
    while let Some(job) = tier.next_write() {
        tier.write(job).unwrap();
    }
}

/// Appends `record` to the first class, never expiring, under its stand-in hash.
fn append(tier: &FlashTier, record: &[u8]) -> Option<u64> {
    tier.append(record, 0, 0, None, record_hash(record))
}

/// Appends `key-0` .. `key-{count-1}` with `value_len`-byte values, then seals and writes
/// every region.
fn write_keys(tier: &FlashTier, count: usize, value_len: usize) {
    for i in 0..count {
        append(tier, &encode(&format!("key-{i}"), value_len)).expect("room");
    }
    tier.seal_all();
    write_all(tier);
}

#[test]
fn records_read_back_from_the_buffer_while_open_and_writing_and_from_the_medium() {
    let tier = tier(16);
    let mut locations = Vec::new();
    for i in 0..300 {
        let record = encode(&format!("key-{i}"), 100 + i * 7 % 2000);
        locations.push(append(&tier, &record).expect("room"));
    }
    // Some regions sealed (queued), one open: every record reads back.
    for (i, &location) in locations.iter().enumerate() {
        assert_eq!(
            read_key(&tier, location),
            Some(format!("key-{i}").into_bytes())
        );
    }
    write_all(&tier);
    tier.seal_all();
    write_all(&tier);
    for (i, &location) in locations.iter().enumerate() {
        assert_eq!(
            read_key(&tier, location),
            Some(format!("key-{i}").into_bytes())
        );
    }
    assert!(tier.counters.reads.load(Ordering::Relaxed) >= 300);
    assert_eq!(
        tier.read(0, &mut AlignedBuf::zeroed(64, 64)),
        None,
        "the superblock"
    );
}

#[test]
fn on_a_medium_of_512_byte_reads_a_record_costs_a_read_about_its_length() {
    let tier = tier_reading_in(16, 512);
    let mut locations = Vec::new();
    for i in 0..200 {
        let record = encode(&format!("key-{i}"), 1000 + i * 13 % 200);
        locations.push(append(&tier, &record).expect("room"));
    }
    tier.seal_all();
    write_all(&tier);
    let mut read_bytes = 0;
    for (i, &location) in locations.iter().enumerate() {
        let (index, offset) = tier.split(location).expect("a record's location");
        let plan = tier.plan_read(index, offset);
        assert!(plan.start.is_multiple_of(512) && plan.len.is_multiple_of(512));
        read_bytes += plan.len;
        // Read back from the medium (no region buffer is left), one read or two.
        assert_eq!(
            read_key(&tier, location),
            Some(format!("key-{i}").into_bytes())
        );
    }
    // With 4 KiB reads each ~1.1 KiB record would cost 4 or 8 KiB.
    let average = read_bytes / locations.len();
    assert!(
        average <= 2048,
        "{average} bytes read per record on average"
    );
    // And read ahead in one batch (the I/O threads' way): every record read.
    let mut records = read_ahead::ReadAhead::default();
    tier.stage_many(&locations, &mut records);
    assert!(locations.iter().all(|&location| records.contains(location)));
}

#[test]
fn reclaim_frees_the_oldest_region_and_visits_its_records() {
    let tier = tier(12);
    let mut appended = Vec::new();
    let mut keys_by_hash = HashMap::new();
    let mut refused = 0;
    for i in 0..2000 {
        let record = encode(&format!("key-{i:05}"), 1000);
        keys_by_hash.insert(record_hash(&record), format!("key-{i:05}"));
        match tier.append(&record, 0, i % CLASSES, None, record_hash(&record)) {
            Some(location) => appended.push((location, format!("key-{i:05}"))),
            None => refused += 1,
        }
        write_all(&tier);
        while tier.needs_reclaim(0) {
            let mut visited = Vec::new();
            tier.reclaim(
                0,
                false,
                &mut |location, key| {
                    let RecordKey::Hash(hash) = key else {
                        panic!("an undamaged region's directory names its keys")
                    };
                    visited.push((location, keys_by_hash[&hash].clone()));
                },
                &mut || {},
            )
            .unwrap();
            assert!(!visited.is_empty());
            for entry in &visited {
                let at = appended.iter().position(|a| a == entry).expect("appended");
                appended.remove(at);
            }
        }
    }
    assert_eq!(refused, 0, "reclaim keeps regions free");
    let reclaimed = tier.counters.reclaimed_regions.load(Ordering::Relaxed);
    assert!(reclaimed > 5);
    // Each reclaim read its directory (a region of 1 KiB records holds about 60), not
    // the region's 64 KiB.
    assert_eq!(tier.counters.reclaim_full_reads.load(Ordering::Relaxed), 0);
    let read = tier.counters.reclaim_read_bytes.load(Ordering::Relaxed);
    assert!(
        read <= reclaimed * 4096,
        "{read} bytes for {reclaimed} reclaims"
    );
    for (location, key) in &appended {
        assert_eq!(read_key(&tier, *location), Some(key.clone().into_bytes()));
    }
}

#[test]
fn a_damaged_directory_sends_reclaim_to_the_records_themselves() {
    let medium = Arc::new(SimulatedMedium::new(
        MemoryMedium::new(BLOCK_SIZE_BYTES + 12 * REGION as usize, 4096),
        Faults::default(),
    ));
    let tier = FlashTier::open(
        Arc::clone(&medium) as Arc<dyn Medium>,
        7,
        REGION,
        8 << 10,
        false,
    )
    .unwrap()
    .0;
    write_keys(&tier, 40, 900);
    // Flip a byte of the oldest region's directory (right after its records).
    let (index, seq, payload_bytes, records) = {
        let regions = tier.regions.lock().unwrap();
        let (index, seq) = regions.written[0];
        let RegionState::Written {
            payload_bytes,
            records,
            ..
        } = regions.states[index as usize]
        else {
            panic!("written")
        };
        (index, seq, payload_bytes, records)
    };
    assert!(records > 1);
    let at = tier.region_offset(index) + format::directory_start(payload_bytes) + 5;
    let block_at = at / 4096 * 4096;
    let mut block = AlignedBuf::zeroed(4096, 4096);
    medium.read_at(block_at, &mut block).unwrap();
    block[(at - block_at) as usize] ^= 0x10;
    medium.write_at(block_at, &block).unwrap();
    let mut visited = Vec::new();
    let count = tier
        .reclaim(
            0,
            true,
            &mut |location, key| {
                let RecordKey::Record(bytes) = key else {
                    panic!("a damaged directory is not used")
                };
                let record::Scan::Record(view) = record::read(bytes) else {
                    panic!("the records are intact")
                };
                visited.push((location, String::from_utf8(view.key.to_vec()).unwrap()));
            },
            &mut || {},
        )
        .unwrap();
    assert_eq!(count, records);
    assert_eq!(visited.len() as u64, records, "region seq {seq}");
    assert_eq!(tier.counters.reclaim_full_reads.load(Ordering::Relaxed), 1);
    for (location, key) in &visited {
        assert!(key.starts_with("key-"), "{location}: {key}");
    }
}

#[test]
fn without_a_free_buffer_or_region_an_append_is_refused_not_waited_for() {
    let tier = tier(12);
    let record = encode("k", 30_000);
    let mut accepted = 0;
    // Nothing is written or reclaimed: the tier fills and then refuses.
    for _ in 0..100 {
        if append(&tier, &record).is_some() {
            accepted += 1;
        }
    }
    assert!(accepted > 0 && accepted < 100, "{accepted}");
    assert!(tier.counters.refused_items.load(Ordering::Relaxed) > 0);
}

fn reopen(medium: Arc<dyn Medium>, pool_id: u64) -> (FlashTier, FlashOpened) {
    FlashTier::open(medium, pool_id, REGION, 8 << 10, true).unwrap()
}

#[test]
fn a_written_region_s_filter_rules_out_other_keys_and_is_rebuilt_after_a_reopen() {
    let len = BLOCK_SIZE_BYTES as u64 + 16 * REGION;
    let medium: Arc<dyn Medium> = Arc::new(MemoryMedium::new(len as usize, 4096));
    let (tier, _) = FlashTier::open(Arc::clone(&medium), 7, REGION, 8 << 10, true).unwrap();
    let mut placed = Vec::new();
    for i in 0..300 {
        let record = encode(&format!("key-{i}"), 500);
        let hash = record_hash(&record);
        placed.push((tier.append(&record, 0, 0, None, hash).expect("room"), hash));
    }
    tier.seal_all();
    write_all(&tier);
    // Another key sharing the low 24 bits (what the index stores) of each record's key.
    let other = |hash: u64| hash ^ 0x5A5A_5A5A_0000_0000;
    let check = |tier: &FlashTier| {
        assert!(
            placed.iter().all(|&(l, h)| tier.may_hold(l, h)),
            "no false negative"
        );
        placed
            .iter()
            .filter(|&&(l, h)| tier.may_hold(l, other(h)))
            .count()
    };
    let passed = check(&tier);
    assert!(passed < 30, "{passed} of 300 other keys passed the filters");
    assert!(tier.stats(0).filter_bytes > 0);
    drop(tier);
    // Reopened: regions kept have no filter until the flash thread builds them.
    let (tier, _) = reopen(Arc::clone(&medium), 7);
    assert_eq!(
        check(&tier),
        300,
        "unfiltered: every candidate may be the key"
    );
    assert!(tier.stats(0).regions_unfiltered > 0);
    while tier.build_one_filter() {}
    assert_eq!(tier.stats(0).regions_unfiltered, 0);
    let passed = check(&tier);
    assert!(
        passed < 30,
        "{passed} of 300 other keys passed the rebuilt filters"
    );
}

/// Hostile region metadata with valid checksums: a header whose directory would run past
/// its region is not kept at a reopen, and a directory entry pointing past the payload is
/// skipped by reclaim (never handed to the engine as a location).
#[test]
fn a_directory_that_does_not_fit_or_points_past_the_records_is_not_trusted() {
    let len = BLOCK_SIZE_BYTES as u64 + 12 * REGION;
    let medium: Arc<dyn Medium> = Arc::new(MemoryMedium::new(len as usize, 4096));
    let (tier, _) = FlashTier::open(Arc::clone(&medium), 7, REGION, 8 << 10, true).unwrap();
    write_keys(&tier, 200, 500);
    let (first, second) = {
        let regions = tier.regions.lock().unwrap();
        (regions.written[0].0, regions.written[1].0)
    };
    drop(tier);
    let mut block = AlignedBuf::zeroed(BLOCK_SIZE_BYTES, 4096);
    let at = |index: u32| BLOCK_SIZE_BYTES as u64 + u64::from(index) * REGION;
    // Region `first`: a records count whose directory cannot fit, checksums recomputed.
    medium.read_at(at(first), &mut block).unwrap();
    let mut header = format::read_region_header(&block).expect("a header");
    header.records = REGION;
    format::write_region_header(&mut block, &header);
    medium.write_at(at(first), &block).unwrap();
    // Region `second`: its first directory entry points past the payload, CRC recomputed.
    medium.read_at(at(second), &mut block).unwrap();
    let mut header = format::read_region_header(&block).expect("a header");
    let directory_at = at(second) + format::directory_start(header.payload_bytes);
    let dir_len = (header.records as usize * DIRECTORY_ENTRY_BYTES).next_multiple_of(4096);
    let dir_block = directory_at / 4096 * 4096;
    let mut dir = AlignedBuf::zeroed(dir_len + 4096, 4096);
    medium.read_at(dir_block, &mut dir).unwrap();
    let skip = (directory_at - dir_block) as usize;
    let entries = skip..skip + header.records as usize * DIRECTORY_ENTRY_BYTES;
    let (_, hash) = format::read_directory_entry(&dir[skip..skip + DIRECTORY_ENTRY_BYTES]);
    format::write_directory_entry(&mut dir[skip..skip + DIRECTORY_ENTRY_BYTES], u32::MAX, hash);
    header.directory_crc = crc32c::crc32c(&dir[entries]);
    medium.write_at(dir_block, &dir).unwrap();
    format::write_region_header(&mut block, &header);
    medium.write_at(at(second), &block).unwrap();

    let (tier, _) = reopen(Arc::clone(&medium), 7);
    {
        let regions = tier.regions.lock().unwrap();
        assert!(!regions.written.iter().any(|&(index, _)| index == first));
        assert_eq!(regions.written[0].0, second, "the oldest kept region");
    }
    let mut visited = Vec::new();
    let count = tier
        .reclaim(
            0,
            true,
            &mut |location, _| visited.push(location),
            &mut || {},
        )
        .unwrap();
    assert_eq!(count, header.records);
    assert_eq!(
        visited.len() as u64,
        header.records - 1,
        "the bad entry skipped"
    );
    assert!(visited.iter().all(|&l| tier
        .split(l)
        .is_some_and(|(i, o)| { i == second && (o as u64) < header.payload_bytes })));
    assert_eq!(tier.counters.reclaim_full_reads.load(Ordering::Relaxed), 0);
}

#[test]
fn a_reopen_keeps_written_regions_and_a_foreign_or_reclaimed_one_is_not_read() {
    let len = BLOCK_SIZE_BYTES as u64 + 12 * REGION;
    let medium: Arc<dyn Medium> = Arc::new(MemoryMedium::new(len as usize, 4096));
    let (tier, opened) = FlashTier::open(Arc::clone(&medium), 7, REGION, 8 << 10, true).unwrap();
    assert_eq!(opened.regions_kept, 0);
    assert!(
        opened.formatted_because.is_some(),
        "a new medium is formatted"
    );
    let mut locations = Vec::new();
    for i in 0..700 {
        let record = encode(&format!("key-{i}"), 500);
        locations.push(
            tier.append(&record, 500, 0, None, record_hash(&record))
                .expect("room"),
        );
        write_all(&tier);
    }
    tier.seal_all();
    write_all(&tier);
    // The oldest region is reclaimed: its records are gone for good.
    let mut reclaimed = Vec::new();
    tier.reclaim(
        0,
        false,
        &mut |location, _| reclaimed.push(location),
        &mut || {},
    )
    .unwrap_or_else(|_| panic!("reclaim"));
    assert!(!reclaimed.is_empty());
    let written = tier.stats(0).regions_written;
    drop(tier);

    let (tier, opened) = reopen(Arc::clone(&medium), 7);
    assert_eq!(opened.formatted_because, None);
    assert_eq!(opened.regions_kept, written);
    for (i, &location) in locations.iter().enumerate() {
        let expected = (!reclaimed.contains(&location)).then(|| format!("key-{i}").into_bytes());
        assert_eq!(read_key(&tier, location), expected, "record {i}");
        assert_eq!(tier.holds(location), expected.is_some());
    }
    // The reclaimed region's seq is never handed out again.
    let next = tier.regions.lock().unwrap().next_seq;
    assert!(
        next > written + 1,
        "next seq {next} follows the reclaimed region's"
    );
    drop(tier);

    let (tier, opened) = reopen(Arc::clone(&medium), 8);
    assert_eq!(opened.formatted_because, Some("it belongs to another pool"));
    assert!(locations
        .iter()
        .all(|&l| read_key(&tier, l).is_none() && !tier.holds(l)));
    drop(tier);

    // A superblock of format version 2 (checksum good) is formatted anew, and says why.
    let mut block = AlignedBuf::zeroed(BLOCK_SIZE_BYTES, 4096);
    medium.read_at(0, &mut block).unwrap();
    block[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c::crc32c(&block[..56]);
    block[56..60].copy_from_slice(&crc.to_le_bytes());
    medium.write_at(0, &block).unwrap();
    let (_, opened) = reopen(Arc::clone(&medium), 8);
    assert_eq!(
        opened.formatted_because,
        Some("it is in another version of the flash format (this build reads 3 and 4)")
    );
}

/// A medium that says it is `len_bytes` long (and is a small one underneath).
#[derive(Debug)]
struct Claimed {
    inner: MemoryMedium,
    len_bytes: u64,
}

impl Medium for Claimed {
    fn len_bytes(&self) -> u64 {
        self.len_bytes
    }
    fn domain(&self) -> strata_pool::PersistenceDomain {
        self.inner.domain()
    }
    fn block_size_bytes(&self) -> usize {
        self.inner.block_size_bytes()
    }
    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), MediumError> {
        self.inner.write_at(offset, data)
    }
    fn persist(&self, offset: u64, len: u64) -> Result<(), strata_pool::PersistError> {
        self.inner.persist(offset, len)
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), MediumError> {
        self.inner.discard(offset, len)
    }
}

/// A medium of 16 TiB or more is refused before anything is read or written: its last
/// records' locations would not fit the index.
#[test]
fn a_medium_beyond_the_index_s_reach_is_refused_untouched() {
    let inner = MemoryMedium::new(BLOCK_SIZE_BYTES, 4096);
    inner.write_at(0, &[0xAB; BLOCK_SIZE_BYTES]).unwrap();
    let medium = Arc::new(Claimed {
        inner,
        len_bytes: 16 << 40,
    });
    let err = FlashTier::open(medium.clone(), 7, REGION, 8 << 10, true).unwrap_err();
    assert!(
        matches!(err, FlashError::TooLarge(bytes) if bytes == 16 << 40),
        "{err}"
    );
    assert!(
        err.to_string().contains(&flash_bytes_max().to_string()),
        "{err}"
    );
    assert!(flash_bytes_max() < 16 << 40 && flash_bytes_max() > (16 << 40) - (1 << 30));
    let mut first = vec![0u8; BLOCK_SIZE_BYTES];
    medium.read_at(0, &mut first).unwrap();
    assert!(first.iter().all(|&b| b == 0xAB), "nothing was formatted");
}

#[test]
fn after_a_power_cut_mid_write_no_record_of_an_earlier_generation_is_read() {
    // One region reused over and over with the same keys at the same offsets: a torn write
    // of a new generation leaves the old generation's records where the new ones belong.
    for seed in 0..40u64 {
        let len = BLOCK_SIZE_BYTES as u64 + 12 * REGION;
        let medium = Arc::new(SimulatedMedium::new(
            MemoryMedium::new(len as usize, 4096),
            Faults::default(),
        ));
        let dyn_medium: Arc<dyn Medium> = medium.clone();
        let (tier, _) = FlashTier::open(Arc::clone(&dyn_medium), 7, REGION, 8 << 10, true).unwrap();
        let mut current = std::collections::HashMap::new();
        for generation in 0..30u64 {
            for i in 0..50u64 {
                let key = format!("key-{i}");
                let record = encode_filled(&key, 900, b'a' + (generation % 26) as u8);
                if let Some(location) = append(&tier, &record) {
                    current.insert(location, (key, record));
                }
            }
            tier.seal_all();
            write_all(&tier);
            tier.persist().unwrap();
            while tier.needs_reclaim(0) {
                tier.reclaim(
                    0,
                    false,
                    &mut |location, _| {
                        current.remove(&location);
                    },
                    &mut || {},
                )
                .unwrap();
            }
        }
        // Some last writes, then a cut that keeps a random part of what was not persisted.
        for i in 0..50u64 {
            let record = encode_filled(&format!("key-{i}"), 900, b'Z');
            if let Some(location) = append(&tier, &record) {
                current.insert(location, (format!("key-{i}"), record));
            }
        }
        tier.seal_all();
        write_all(&tier);
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let image = medium.crash_image(&mut |_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % 3 == 0
        });
        drop(tier);
        let (tier, _) = reopen(Arc::new(MemoryMedium::from_image(image, 4096)), 7);
        let mut out = AlignedBuf::zeroed(4096, 4096);
        for (&location, (key, record)) in &current {
            let Some(range) = tier.read(location, &mut out) else {
                continue; // Lost with the cut: a miss.
            };
            if let record::Scan::Record(view) = record::read(&out[range.clone()]) {
                if view.key == key.as_bytes() {
                    assert_eq!(
                        &out[range],
                        &record[..],
                        "seed {seed}: {key} read back stale"
                    );
                }
            }
        }
    }
}
