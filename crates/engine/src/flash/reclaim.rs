//! Reclaim: the oldest written region (or one whose records all expired) gives up its index
//! entries, is marked reclaimed on the medium, and is free again.

use super::*;

/// A written region being reclaimed, as its state said when it was taken.
#[derive(Clone, Copy)]
struct ReclaimVictim {
    index: u32,
    seq: u64,
    payload_bytes: u64,
    records: u64,
    directory_crc: u32,
}

impl FlashTier {
    /// The region the flash thread should reclaim next, if any: one whose records have all
    /// expired at `now_ms` (dropped whole, Segcache's idea), else the oldest when fewer
    /// regions are free than the reserve.
    pub(super) fn reclaim_candidate(
        &self,
        regions: &Regions,
        now_ms: u64,
        oldest: bool,
    ) -> Option<usize> {
        let expired = regions.written.iter().position(|&(index, _)| {
            matches!(
                regions.states[index as usize],
                RegionState::Written { expires_at_ms, .. } if expires_at_ms <= now_ms
            )
        });
        expired.or_else(|| {
            ((oldest || regions.free.len() < FREE_REGIONS_MIN) && !regions.written.is_empty())
                .then_some(0)
        })
    }

    /// Whether the flash thread has a region to reclaim.
    pub(crate) fn needs_reclaim(&self, now_ms: u64) -> bool {
        let regions = self.regions.lock().expect("regions lock");
        self.reclaim_candidate(&regions, now_ms, false).is_some()
    }

    /// Reclaims a region (see `needs_reclaim`): calls `unindex(location, key)` for each of its
    /// records (the engine drops the index entries that still point there), marks it reclaimed
    /// on the medium, and frees it. The keys come from the region's directory (one short
    /// read), or, where that fails its CRC or cannot be read, from the records themselves
    /// (the whole region read). Returns the records visited.
    pub(crate) fn reclaim(
        &self,
        now_ms: u64,
        oldest: bool,
        unindex: &mut dyn FnMut(u64, RecordKey<'_>),
        visited_all: &mut dyn FnMut(),
    ) -> Result<u64, MediumError> {
        let Some(victim) = self.take_reclaim_candidate(now_ms, oldest) else {
            return Ok(0);
        };
        let visited = self.unindex_region(&victim, unindex);
        // The caller's batched drops happen before the region can be reused.
        visited_all();
        // A region that cannot be read back: its entries fail every read's check (they miss)
        // and are replaced or dropped as their keys are written; nothing is served from it.
        // The reclaimed header goes down (and is persisted) before the region is reused, so
        // no later open takes its old records for current ones.
        let marked = self.mark_reclaimed(victim.index, victim.seq, now_ms);
        let mut regions = self.regions.lock().expect("regions lock");
        regions.states[victim.index as usize] = RegionState::Free;
        regions.free.push_back(victim.index);
        self.counters
            .reclaimed_regions
            .fetch_add(1, Ordering::Relaxed);
        visited.and_then(|visited| marked.map(|()| visited))
    }

    /// Takes the region to reclaim off the written list (see `reclaim_candidate`) and drops
    /// its key filter; `None` when there is none.
    fn take_reclaim_candidate(&self, now_ms: u64, oldest: bool) -> Option<ReclaimVictim> {
        let mut regions = self.regions.lock().expect("regions lock");
        let at = self.reclaim_candidate(&regions, now_ms, oldest)?;
        let (index, seq) = regions.written.remove(at).expect("candidate in range");
        // Its entries are about to go: no read needs its filter, and its next use has none.
        *self.filters[index as usize].write().expect("filter lock") = None;
        let RegionState::Written {
            payload_bytes,
            records,
            directory_crc,
            ..
        } = regions.states[index as usize]
        else {
            unreachable!("a listed region is written");
        };
        Some(ReclaimVictim {
            index,
            seq,
            payload_bytes,
            records,
            directory_crc,
        })
    }

    /// Calls `unindex(location, key)` for each record of the region being reclaimed, its keys
    /// from the directory, else from the records themselves (the whole region read). Returns
    /// the records visited, or the read's error.
    fn unindex_region(
        &self,
        victim: &ReclaimVictim,
        unindex: &mut dyn FnMut(u64, RecordKey<'_>),
    ) -> Result<u64, MediumError> {
        let ReclaimVictim {
            index,
            seq,
            payload_bytes,
            records,
            directory_crc,
        } = *victim;
        let directory = self.read_directory(
            index,
            payload_bytes,
            records,
            directory_crc,
            Some(&self.counters.reclaim_read_bytes),
        );
        if let Some(entries) = directory {
            for entry in entries.chunks_exact(DIRECTORY_ENTRY_BYTES) {
                let (offset, hash) = format::read_directory_entry(entry);
                if u64::from(offset) < payload_bytes {
                    unindex(
                        self.location_of(index, offset as usize),
                        RecordKey::Hash(hash),
                    );
                }
            }
            return Ok(records);
        }
        self.counters
            .reclaim_full_reads
            .fetch_add(1, Ordering::Relaxed);
        let block = self.medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
        let len = (BLOCK_SIZE_BYTES + payload_bytes as usize).next_multiple_of(block);
        let mut buf = AlignedBuf::zeroed(len, block);
        let read = self.medium.read_at(self.region_offset(index), &mut buf);
        self.counters
            .reclaim_read_bytes
            .fetch_add(len as u64, Ordering::Relaxed);
        if let Err(err) = read {
            self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
            return Err(err);
        }
        Ok(self.visit_records(index, seq, &buf[BLOCK_SIZE_BYTES..], unindex))
    }

    /// Writes and persists the reclaimed header of region `index` (seq `seq`).
    fn mark_reclaimed(&self, index: u32, seq: u64, now_ms: u64) -> Result<(), MediumError> {
        let header = RegionHeader {
            flash_id: self.superblock.flash_id,
            seq,
            created_ms: now_ms,
            expires_at_ms: 0,
            payload_bytes: 0,
            records: 0,
            payload_crc: crc32c::crc32c(&[]),
            directory_crc: crc32c::crc32c(&[]),
            reclaimed: true,
        };
        let block = self.medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
        let mut buf = AlignedBuf::zeroed(BLOCK_SIZE_BYTES, block);
        format::write_region_header(&mut buf[..BLOCK_SIZE_BYTES], &header);
        let offset = self.region_offset(index);
        self.medium
            .write_at(offset, &buf[..BLOCK_SIZE_BYTES])
            .and_then(|()| {
                self.medium
                    .persist(offset, BLOCK_SIZE_BYTES as u64)
                    .map_err(|e| MediumError::Io {
                        op: "persist reclaimed region header",
                        path: "(flash)".into(),
                        message: e.message,
                        os_error: None,
                    })
            })
    }

    /// The directory of written region `index` (`records` entries after `payload_bytes` of
    /// records), read in the medium's read alignment and checked against its CRC; `None`
    /// when it cannot be read or fails the check. The bytes read count in `read_bytes`.
    pub(super) fn read_directory(
        &self,
        index: u32,
        payload_bytes: u64,
        records: u64,
        directory_crc: u32,
        read_bytes: Option<&AtomicU64>,
    ) -> Option<Vec<u8>> {
        let align = self.read_align() as u64;
        let at = self.region_offset(index) + format::directory_start(payload_bytes);
        let len = records.checked_mul(DIRECTORY_ENTRY_BYTES as u64)?;
        let start = at / align * align;
        let end = (at + len).next_multiple_of(align);
        let mut buf = AlignedBuf::zeroed((end - start) as usize, align as usize);
        if let Some(counter) = read_bytes {
            counter.fetch_add(end - start, Ordering::Relaxed);
        }
        if self.medium.read_at(start, &mut buf).is_err() {
            self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let directory = &buf[(at - start) as usize..(at - start + len) as usize];
        (crc32c::crc32c(directory) == directory_crc).then(|| directory.to_vec())
    }

    pub(super) fn visit_records(
        &self,
        index: u32,
        seq: u64,
        payload: &[u8],
        unindex: &mut dyn FnMut(u64, RecordKey<'_>),
    ) -> u64 {
        let stamp = self.stamp(seq).to_le_bytes();
        let mut at = 0;
        let mut visited = 0;
        while at + STAMP_BYTES < payload.len() {
            let body = &payload[at + STAMP_BYTES..];
            let Some(size) = stamped_record_size(payload, at, &stamp) else {
                at += self.record_align(); // Damage: look at the next record boundary.
                continue;
            };
            unindex(
                self.location_of(index, at),
                RecordKey::Record(&body[..size]),
            );
            visited += 1;
            at += (STAMP_BYTES + size).next_multiple_of(self.record_align());
        }
        visited
    }
}
