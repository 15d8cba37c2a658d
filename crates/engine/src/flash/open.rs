//! Opening the flash tier: the superblock (kept, or the medium formatted), the regions
//! listed from their headers, and the key filters rebuilt from their directories.

use super::*;

/// What a medium's superblock must say for its regions to be kept.
struct Geometry {
    pool_id: u64,
    region_size_bytes: u64,
    regions: u64,
    record_align: usize,
}

/// Why the medium whose first block is `first` (superblock `found`) cannot be kept as it is,
/// or `None` when it can.
fn why_not_kept(
    first: &[u8],
    found: Option<Superblock>,
    keep: bool,
    geometry: &Geometry,
) -> Option<&'static str> {
    match found {
        None if format::superblock_version(first).is_some_and(|v| !format::reads_version(v)) => {
            const _: () = assert!(format::FORMAT_VERSION == 4, "update the message");
            Some("it is in another version of the flash format (this build reads 3 and 4)")
        }
        None => Some("no strata flash superblock (a new or foreign medium, or damage)"),
        Some(_) if !keep => Some("the memory tier did not keep its items"),
        Some(sb) if sb.pool_id != geometry.pool_id => Some("it belongs to another pool"),
        Some(sb) if sb.region_size_bytes != geometry.region_size_bytes => {
            Some("its region size differs from the configured one")
        }
        Some(sb) if sb.region_count != geometry.regions => {
            Some("its size differs from the configured one")
        }
        Some(sb) if sb.record_align_bytes as usize != geometry.record_align => {
            Some("its record alignment differs from the one its size calls for")
        }
        Some(_) => None,
    }
}

/// Writes and persists a new superblock for `geometry` in `first` and on the medium: every
/// region is free from now on.
fn format_medium(
    medium: &dyn Medium,
    first: &mut AlignedBuf,
    geometry: &Geometry,
) -> Result<Superblock, FlashError> {
    let sb = Superblock {
        flash_id: random_u64(),
        pool_id: geometry.pool_id,
        region_size_bytes: geometry.region_size_bytes,
        region_count: geometry.regions,
        created_unix_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        record_align_bytes: geometry.record_align as u32,
    };
    format::write_superblock(first, &sb);
    medium.write_at(0, first)?;
    medium
        .persist(0, BLOCK_SIZE_BYTES as u64)
        .map_err(|e| MediumError::Io {
            op: "persist superblock",
            path: "(flash)".into(),
            message: e.message,
            os_error: None,
        })?;
    Ok(sb)
}

/// The key filter of a region whose directory is `directory` (its entries' key hashes).
pub(super) fn key_filter(directory: &[u8]) -> filter::KeyFilter {
    let entries = directory.chunks_exact(DIRECTORY_ENTRY_BYTES);
    let count = entries.len();
    filter::KeyFilter::new(
        count,
        entries.map(|entry| format::read_directory_entry(entry).1),
    )
}

impl FlashTier {
    /// Opens the flash tier on `medium` for pool `pool_id`: keeps what it holds when `keep` is
    /// set and its superblock names this pool and geometry (regions are then listed from their
    /// headers), else formats it. Records of at most `record_bytes_max` bytes must fit a region.
    pub(crate) fn open(
        medium: Arc<dyn Medium>,
        pool_id: u64,
        region_size_bytes: u64,
        record_bytes_max: usize,
        keep: bool,
    ) -> Result<(FlashTier, FlashOpened), FlashError> {
        let medium_bytes = medium.len_bytes();
        let record_align = format::record_align_for(medium_bytes, LOCATION_UNITS_MAX)
            .ok_or(FlashError::TooLarge(medium_bytes))?;
        let payload_max = region_size_bytes.saturating_sub(BLOCK_SIZE_BYTES as u64);
        // The payload room is a multiple of 4 KiB: the largest record, rounded up to 64 bytes,
        // leaves at least 64 more, room for the directory's start and its 12-byte entry.
        let largest_room = (record_bytes_max + STAMP_BYTES).next_multiple_of(record_align.max(64));
        if !region_size_bytes.is_multiple_of(BLOCK_SIZE_BYTES as u64)
            || payload_max < (largest_room + 64) as u64
        {
            return Err(FlashError::RegionSize(region_size_bytes));
        }
        let regions =
            medium.len_bytes().saturating_sub(BLOCK_SIZE_BYTES as u64) / region_size_bytes;
        let min = (FREE_REGIONS_MIN + 2) as u64;
        if regions < min {
            return Err(FlashError::TooSmall {
                regions,
                region_size_bytes,
                min,
            });
        }
        let block = medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
        let mut first = AlignedBuf::zeroed(BLOCK_SIZE_BYTES, block);
        medium.read_at(0, &mut first)?;
        let found = format::read_superblock(&first);
        let geometry = Geometry {
            pool_id,
            region_size_bytes,
            regions,
            record_align,
        };
        let why_not = why_not_kept(&first, found, keep, &geometry);
        let superblock = match (found, why_not) {
            (Some(sb), None) => sb,
            _ => format_medium(&*medium, &mut first, &geometry)?,
        };
        let tier = FlashTier {
            medium,
            superblock,
            regions: Mutex::new(Regions {
                states: (0..regions).map(|_| RegionState::Free).collect(),
                free: VecDeque::new(),
                written: VecDeque::new(),
                open: Default::default(),
                spare: Vec::new(),
                buffers: 0,
                to_write: VecDeque::new(),
                writing: 0,
                next_seq: 1,
                unfiltered: VecDeque::new(),
            }),
            counters: FlashCounters::default(),
            writer: Mutex::new(None),
            filters: (0..regions).map(|_| RwLock::new(None)).collect(),
            read_delay_for_tests: std::time::Duration::ZERO,
        };
        let regions_kept = tier.list_regions()?;
        Ok((
            tier,
            FlashOpened {
                regions_kept,
                formatted_because: why_not,
            },
        ))
    }

    /// Reads every region header: written regions of this medium join the FIFO, the others
    /// are free; the next seq follows the greatest found. Returns the written regions.
    pub(super) fn list_regions(&self) -> Result<u64, MediumError> {
        let block = self.medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
        let mut buf = AlignedBuf::zeroed(BLOCK_SIZE_BYTES, block);
        let mut regions = self.regions.lock().expect("regions lock");
        let mut written = Vec::new();
        let mut seq_max = 0;
        for index in 0..self.superblock.region_count as u32 {
            self.medium.read_at(self.region_offset(index), &mut buf)?;
            let header = format::read_region_header(&buf).filter(|h| {
                h.flash_id == self.superblock.flash_id && h.fits(self.superblock.region_size_bytes)
            });
            match header {
                Some(h) => {
                    seq_max = seq_max.max(h.seq);
                    if h.reclaimed {
                        regions.free.push_back(index);
                    } else {
                        regions.states[index as usize] = RegionState::Written {
                            seq: h.seq,
                            payload_bytes: h.payload_bytes,
                            expires_at_ms: h.expires_at_ms,
                            records: h.records,
                            directory_crc: h.directory_crc,
                        };
                        written.push((index, h.seq));
                    }
                }
                None => regions.free.push_back(index),
            }
        }
        written.sort_unstable_by_key(|&(_, seq)| seq);
        regions.written = written.into_iter().collect();
        regions.next_seq = seq_max + 1;
        regions.unfiltered = regions.written.iter().copied().collect();
        Ok(regions.written.len() as u64)
    }

    /// Builds the key filter of one written region kept from before this open, from its
    /// directory (the flash thread's background work after a restart; until then reads of
    /// that region are not filtered). Returns whether one was left to do.
    pub(crate) fn build_one_filter(&self) -> bool {
        let (index, seq, payload_bytes, records, directory_crc) = {
            let mut regions = self.regions.lock().expect("regions lock");
            let Some((index, seq)) = regions.unfiltered.pop_front() else {
                return false;
            };
            match regions.states[index as usize] {
                RegionState::Written {
                    seq: now,
                    payload_bytes,
                    records,
                    directory_crc,
                    ..
                } if now == seq => (index, seq, payload_bytes, records, directory_crc),
                _ => return true, // Reclaimed meanwhile.
            }
        };
        // A directory that cannot be read or fails its check leaves the region unfiltered.
        let Some(directory) =
            self.read_directory(index, payload_bytes, records, directory_crc, None)
        else {
            return true;
        };
        let filter = key_filter(&directory);
        let regions = self.regions.lock().expect("regions lock");
        if matches!(regions.states[index as usize], RegionState::Written { seq: now, .. } if now == seq)
        {
            *self.filters[index as usize].write().expect("filter lock") = Some(filter);
        }
        true
    }
}
