//! Writing: records appended to open region buffers (one per expiry class), regions sealed
//! and handed to the flash thread, which writes each whole.

use super::*;

/// Where an appended record goes and what the tier counts of it (see [`FlashTier::append`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordPlacement {
    /// The item's value bytes (counted as `appended_value_bytes`).
    pub(crate) value_len: usize,
    /// Its expiry class.
    pub(crate) class: usize,
    pub(crate) expires_at_ms: Option<u64>,
    /// The engine's hash of its key, for the region's directory.
    pub(crate) key_hash: u64,
}

impl FlashTier {
    /// Appends a record (its bytes as the memory tier holds them, CAS written out) to the open
    /// region of `class`; returns its location, or `None` when the tier is behind (no buffer
    /// or free region): the caller drops the item instead. Never waits for the medium.
    /// `key_hash` (the engine's hash of the record's key) goes into the region's directory,
    /// which reclaim reads instead of the records.
    pub(crate) fn append(
        &self,
        record: &[u8],
        value_len: usize,
        class: usize,
        expires_at_ms: Option<u64>,
        key_hash: u64,
    ) -> Option<u64> {
        let placement = RecordPlacement {
            value_len,
            class,
            expires_at_ms,
            key_hash,
        };
        self.append_with(record.len(), placement, |into| into.copy_from_slice(record))
    }

    /// [`FlashTier::append`] of a record of `record_len` bytes that `write` writes in place
    /// (every byte of the slice it is given), under the regions' lock: a record built of
    /// pieces (a family's bundle) is copied once. `None` too for a record larger than a
    /// region, which no region can take.
    pub(crate) fn append_with(
        &self,
        record_len: usize,
        placement: RecordPlacement,
        write: impl FnOnce(&mut [u8]),
    ) -> Option<u64> {
        let RecordPlacement {
            value_len,
            class,
            expires_at_ms,
            key_hash,
        } = placement;
        if !self.holds_record(record_len) {
            return None; // Larger than a region (a family's bundle can be): never placed.
        }
        let size = (STAMP_BYTES + record_len).next_multiple_of(self.record_align());
        let region_bytes = self.superblock.region_size_bytes as usize;
        let mut regions = self.regions.lock().expect("regions lock");
        let needs_new = regions.open[class].as_ref().is_none_or(|open| {
            // The records, then the directory with this record's entry.
            let directory = (open.records as usize + 1) * DIRECTORY_ENTRY_BYTES;
            let end = open.payload_len + format::head_padding(open.payload_len) + size;
            format::directory_start(end as u64) as usize + directory > region_bytes
        });
        if needs_new {
            if regions.open[class].is_some() {
                self.seal(&mut regions, class);
            }
            if !self.open_region(&mut regions, class) {
                self.counters.refused_items.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        }
        let open = regions.open[class].as_mut().expect("opened above");
        let padding = format::head_padding(open.payload_len);
        let padding_at = BLOCK_SIZE_BYTES + open.payload_len;
        open.buf[padding_at..padding_at + padding].fill(0);
        open.payload_len += padding;
        let at = BLOCK_SIZE_BYTES + open.payload_len;
        let stamp = self.stamp(open.seq);
        open.buf[at..at + STAMP_BYTES].copy_from_slice(&stamp.to_le_bytes());
        let body = at + STAMP_BYTES;
        write(&mut open.buf[body..body + record_len]);
        open.buf[body + record_len..at + size].fill(0);
        let location = self.location_of(open.index, open.payload_len);
        let entry = region_bytes - (open.records as usize + 1) * DIRECTORY_ENTRY_BYTES;
        format::write_directory_entry(
            &mut open.buf[entry..entry + DIRECTORY_ENTRY_BYTES],
            u32::try_from(open.payload_len).expect("a region is under 4 GiB"),
            key_hash,
        );
        open.payload_len += size;
        open.records += 1;
        open.expires_at_ms = open.expires_at_ms.max(expires_at_ms.unwrap_or(u64::MAX));
        self.counters.appended_items.fetch_add(1, Ordering::Relaxed);
        self.counters
            .appended_bytes
            .fetch_add((padding + size) as u64, Ordering::Relaxed);
        self.counters
            .appended_value_bytes
            .fetch_add(value_len as u64, Ordering::Relaxed);
        Some(location)
    }

    pub(super) fn open_region(&self, regions: &mut Regions, class: usize) -> bool {
        if regions.free.len() <= BUFFERS_IN_FLIGHT {
            return false; // The reserve is for regions being reclaimed; wait for it.
        }
        let buf = match regions.spare.pop() {
            Some(buf) => buf,
            None if regions.buffers < CLASSES + BUFFERS_IN_FLIGHT => {
                regions.buffers += 1;
                let block = self.medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
                AlignedBuf::zeroed(self.superblock.region_size_bytes as usize, block)
            }
            None => return false,
        };
        let index = regions.free.pop_front().expect("free checked above");
        let seq = regions.next_seq;
        regions.next_seq += 1;
        regions.states[index as usize] = RegionState::Open { seq };
        regions.open[class] = Some(OpenRegion {
            index,
            seq,
            buf,
            payload_len: 0,
            records: 0,
            expires_at_ms: 0,
        });
        true
    }

    /// Seals the open region of `class`: its header is written into its buffer and it joins
    /// the queue of regions to write.
    pub(super) fn seal(&self, regions: &mut Regions, class: usize) {
        let Some(mut open) = regions.open[class].take() else {
            return;
        };
        // The directory moves from the buffer's end to just behind the records.
        let region_bytes = open.buf.len();
        let directory_len = open.records as usize * DIRECTORY_ENTRY_BYTES;
        let directory_at = format::directory_start(open.payload_len as u64) as usize;
        open.buf
            .copy_within(region_bytes - directory_len..region_bytes, directory_at);
        let directory_end = directory_at + directory_len;
        let block = self.medium.block_size_bytes().max(BLOCK_SIZE_BYTES);
        let len_bytes = directory_end.next_multiple_of(block).min(region_bytes);
        open.buf[BLOCK_SIZE_BYTES + open.payload_len..directory_at].fill(0);
        open.buf[directory_end..len_bytes].fill(0);
        let payload = &open.buf[BLOCK_SIZE_BYTES..BLOCK_SIZE_BYTES + open.payload_len];
        let directory_crc = crc32c::crc32c(&open.buf[directory_at..directory_end]);
        let header = RegionHeader {
            flash_id: self.superblock.flash_id,
            seq: open.seq,
            created_ms: now_ms(),
            expires_at_ms: open.expires_at_ms,
            payload_bytes: open.payload_len as u64,
            records: open.records,
            payload_crc: crc32c::crc32c(payload),
            directory_crc,
            reclaimed: false,
        };
        format::write_region_header(&mut open.buf[..BLOCK_SIZE_BYTES], &header);
        let buf = Arc::new(open.buf);
        regions.states[open.index as usize] = RegionState::Writing {
            seq: open.seq,
            buf: Arc::clone(&buf),
        };
        regions.to_write.push_back(RegionWrite {
            index: open.index,
            buf,
            len_bytes,
            seq: open.seq,
            payload_bytes: open.payload_len as u64,
            expires_at_ms: open.expires_at_ms,
            records: open.records,
            directory_crc,
        });
        if let Some(writer) = self.writer.lock().expect("writer lock").as_ref() {
            writer.unpark();
        }
    }

    /// Whether sealed regions wait for the flash thread.
    pub(crate) fn has_writes_queued(&self) -> bool {
        !self
            .regions
            .lock()
            .expect("regions lock")
            .to_write
            .is_empty()
    }

    /// Names the thread that writes sealed regions, to wake when one is sealed.
    pub(crate) fn set_writer(&self, thread: std::thread::Thread) {
        *self.writer.lock().expect("writer lock") = Some(thread);
    }

    /// Seals every open region that holds records (a clean close, or a test that wants
    /// everything written).
    pub(crate) fn seal_all(&self) {
        let mut regions = self.regions.lock().expect("regions lock");
        for class in 0..CLASSES {
            if regions.open[class].as_ref().is_some_and(|o| o.records > 0) {
                self.seal(&mut regions, class);
            }
        }
    }

    /// The next sealed region to write, if any (the flash thread's work; a close's too).
    pub(crate) fn next_write(&self) -> Option<RegionWrite> {
        let mut regions = self.regions.lock().expect("regions lock");
        let job = regions.to_write.pop_front()?;
        regions.writing += 1;
        Some(job)
    }

    /// Writes a sealed region to the medium and records it as written. A failed write leaves
    /// the region written as far as the table knows: reads of its records fail their checks
    /// and miss, and reclaim frees it in turn.
    pub(crate) fn write(&self, job: RegionWrite) -> Result<(), MediumError> {
        let offset = self.region_offset(job.index);
        let result = self.medium.write_at(offset, &job.buf[..job.len_bytes]);
        let directory_at = format::directory_start(job.payload_bytes) as usize;
        let filter = open::key_filter(
            &job.buf[directory_at..directory_at + job.records as usize * DIRECTORY_ENTRY_BYTES],
        );
        let mut regions = self.regions.lock().expect("regions lock");
        regions.writing -= 1;
        regions.states[job.index as usize] = RegionState::Written {
            seq: job.seq,
            payload_bytes: job.payload_bytes,
            expires_at_ms: job.expires_at_ms,
            records: job.records,
            directory_crc: job.directory_crc,
        };
        *self.filters[job.index as usize]
            .write()
            .expect("filter lock") = Some(filter);
        regions.written.push_back((job.index, job.seq));
        match &result {
            Ok(()) => {
                self.counters
                    .written_regions
                    .fetch_add(1, Ordering::Relaxed);
                self.counters
                    .written_bytes
                    .fetch_add(job.len_bytes as u64, Ordering::Relaxed);
            }
            Err(_) => {
                self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        // The buffer comes back once no reader holds it.
        match Arc::try_unwrap(job.buf) {
            Ok(buf) => regions.spare.push(buf),
            Err(_) => regions.buffers -= 1,
        }
        result
    }
}
