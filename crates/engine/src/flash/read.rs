//! Reads: a record from its region's buffer while that is not yet written, else from the
//! medium, checked against its region's seq; a record read ahead and lent to this thread's
//! reads (`read_ahead`) first.

use super::read_ahead::{self, ReadAhead};
use super::*;

impl FlashTier {
    /// Reads the record at `location` into `out` (resized), from the region's buffer while it
    /// is not yet written, else from the medium; returns the record's bytes within `out` (its
    /// stamp checked, its content not: `record::read` is the caller's), or `None` when the
    /// location holds no record of this tier's current generation there (a miss).
    pub(crate) fn read(
        &self,
        location: u64,
        out: &mut AlignedBuf,
    ) -> Option<std::ops::Range<usize>> {
        self.read_for(location, out, ReadFor::Request)
    }

    /// [`FlashTier::read`], counting its medium reads as `purpose`'s.
    pub(crate) fn read_for(
        &self,
        location: u64,
        out: &mut AlignedBuf,
        purpose: ReadFor,
    ) -> Option<std::ops::Range<usize>> {
        let (index, offset) = self.split(location)?;
        let started = std::time::Instant::now();
        let (seq, buffered) = {
            let regions = self.regions.lock().expect("regions lock");
            let state = &regions.states[index as usize];
            let seq = state.seq()?;
            match state {
                RegionState::Free => return None,
                RegionState::Open { .. } => {
                    let open = regions.open.iter().flatten().find(|o| o.index == index)?;
                    if offset + STAMP_BYTES >= open.payload_len {
                        return None;
                    }
                    let at = BLOCK_SIZE_BYTES + offset;
                    let end = BLOCK_SIZE_BYTES + open.payload_len;
                    return self.take_record(seq, &open.buf[at..end], 0, out);
                }
                RegionState::Writing { buf, .. } => (seq, Some(Arc::clone(buf))),
                RegionState::Written { payload_bytes, .. } => {
                    if (offset + STAMP_BYTES) as u64 >= *payload_bytes {
                        return None;
                    }
                    (seq, None)
                }
            }
        };
        if buffered.is_none() {
            if let Some(range) = self.take_read_ahead(location, seq, out) {
                return Some(range);
            }
        }
        if let Some(buf) = buffered {
            let at = BLOCK_SIZE_BYTES + offset;
            return self.take_record(seq, &buf[at..], 0, out);
        }
        let range = self.read_medium(index, offset, seq, out, purpose)?;
        self.counters.record_read(started.elapsed(), range.len());
        Some(range)
    }

    /// Reads the records at `locations` from the medium, all in flight at once, into `into`
    /// (an I/O thread's work for requests that wait, so that their reads then find them
    /// without I/O). Nothing is read for a location not on the medium.
    pub(crate) fn stage_many(&self, locations: &[u64], into: &mut ReadAhead) {
        let mut reads = self.plan_reads(locations);
        let block = self.read_align();
        // A second round for the records longer than their first read.
        for _ in 0..2 {
            if reads.is_empty() {
                return;
            }
            if !self.read_delay_for_tests.is_zero() {
                std::thread::sleep(self.read_delay_for_tests);
            }
            let mut bufs: Vec<AlignedBuf> = reads
                .iter()
                .map(|read| AlignedBuf::zeroed(read.plan.len, block))
                .collect();
            let results = {
                let mut batch: Vec<(u64, &mut [u8])> = reads
                    .iter()
                    .zip(bufs.iter_mut())
                    .map(|(read, buf)| (read.plan.start, &mut buf[..]))
                    .collect();
                self.medium.read_many(&mut batch)
            };
            let mut longer = Vec::new();
            for ((mut read, buf), result) in reads.into_iter().zip(bufs).zip(results) {
                let bytes = result.is_ok().then_some(&buf[..]);
                if self.finish_read(&mut read, bytes, into) == ReadOutcome::ReadMore {
                    longer.push(read);
                }
            }
            reads = longer;
        }
    }

    /// The reads that would read ahead the records at `locations`: those in a written region,
    /// each once (see [`FlashRead`]).
    pub(crate) fn plan_reads(&self, locations: &[u64]) -> Vec<FlashRead> {
        let mut planned: Vec<FlashRead> = Vec::with_capacity(locations.len());
        let regions = self.regions.lock().expect("regions lock");
        for &location in locations {
            let Some((index, offset)) = self.split(location) else {
                continue;
            };
            let seq = match &regions.states[index as usize] {
                RegionState::Written {
                    seq, payload_bytes, ..
                } if ((offset + STAMP_BYTES) as u64) < *payload_bytes => *seq,
                _ => continue, // In a buffer (no I/O to save) or not a record.
            };
            if planned.iter().any(|read| read.location == location) {
                continue;
            }
            planned.push(FlashRead {
                location,
                seq,
                plan: self.plan_read(index, offset),
                extended: false,
                started: std::time::Instant::now(),
            });
        }
        self.counters
            .reads
            .fetch_add(planned.len() as u64, Ordering::Relaxed);
        planned
    }

    /// Takes what `read` read (`None`: the read failed) and adds the record to `into`, for the
    /// read that will ask for it; or says to read more, `read` then says where.
    pub(crate) fn finish_read(
        &self,
        read: &mut FlashRead,
        bytes: Option<&[u8]>,
        into: &mut ReadAhead,
    ) -> ReadOutcome {
        let Some(bytes) = bytes else {
            self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
            return ReadOutcome::Miss;
        };
        let range = match self.check_read(bytes, &read.plan, read.seq) {
            Checked::Record(range) => range,
            Checked::Miss => return ReadOutcome::Miss,
            Checked::Longer(_) if read.extended => return ReadOutcome::Miss,
            Checked::Longer(len) => {
                read.plan.len = len;
                read.extended = true;
                self.counters.reads.fetch_add(1, Ordering::Relaxed);
                return ReadOutcome::ReadMore;
            }
        };
        self.counters
            .record_read(read.started.elapsed(), range.len());
        into.insert(read.location, read.seq, bytes[range].to_vec());
        ReadOutcome::Staged
    }

    /// A duplicate of the medium's descriptor for a server's own io_uring reads
    /// ([`Medium::read_file`]); `None` where the medium has none, or reads are slowed for tests
    /// (only `read_many` is slowed).
    pub(crate) fn read_file(&self) -> Option<std::os::fd::OwnedFd> {
        if !self.read_delay_for_tests.is_zero() {
            return None;
        }
        self.medium.read_file()
    }

    /// Takes the record read ahead for `location` and lent to this thread's reads into `out`,
    /// if it is of generation `seq` (a region reclaimed and written again since makes it
    /// worthless: dropped).
    fn take_read_ahead(
        &self,
        location: u64,
        seq: u64,
        out: &mut AlignedBuf,
    ) -> Option<std::ops::Range<usize>> {
        let bytes = read_ahead::take_lent(location, seq)?;
        let len = bytes.len();
        if out.len() < len {
            *out = AlignedBuf::zeroed(len.next_multiple_of(BLOCK_SIZE_BYTES), BLOCK_SIZE_BYTES);
        }
        out[..len].copy_from_slice(&bytes);
        self.counters.staged_reads.fetch_add(1, Ordering::Relaxed);
        Some(0..len)
    }

    /// Copies the record stamped `seq` at `bytes[at..]` into `out`.
    pub(super) fn take_record(
        &self,
        seq: u64,
        bytes: &[u8],
        at: usize,
        out: &mut AlignedBuf,
    ) -> Option<std::ops::Range<usize>> {
        if bytes.get(at..at + STAMP_BYTES)? != self.stamp(seq).to_le_bytes() {
            return None;
        }
        let body = &bytes[at + STAMP_BYTES..];
        let len = crate::record::declared_size(body)?.min(body.len());
        if out.len() < len {
            *out = AlignedBuf::zeroed(len.next_multiple_of(BLOCK_SIZE_BYTES), BLOCK_SIZE_BYTES);
        }
        out[..len].copy_from_slice(&body[..len]);
        Some(0..len)
    }

    /// Where the first read of the record at `offset` of region `index`'s payload goes: the
    /// blocks from its start to [`FlashTier::first_read_bytes`] past it (most records fit: one
    /// read; a longer one is read again at its length).
    pub(super) fn plan_read(&self, index: u32, offset: usize) -> ReadPlan {
        let block = self.read_align();
        let byte = self.region_offset(index) + (BLOCK_SIZE_BYTES + offset) as u64;
        let start = byte / block as u64 * block as u64;
        let skip = (byte - start) as usize;
        let room = (self.region_offset(index) + self.superblock.region_size_bytes - start) as usize;
        let len = (skip + self.first_read_bytes())
            .next_multiple_of(block)
            .min(room);
        ReadPlan {
            start,
            skip,
            len,
            room,
        }
    }

    /// Bytes a first read covers past a record's start: the records appended so far, on
    /// average, with a quarter to spare, at most [`FIRST_READ_BYTES_MAX`] (4 KiB before any
    /// was appended, as after a restart). Reading past the record costs bandwidth: a 4 KiB
    /// guess made most reads of 1 KiB records 8 KiB long (the record starts inside its first
    /// block), where about two thirds of them fit one block.
    pub(super) fn first_read_bytes(&self) -> usize {
        let items = self.counters.appended_items.load(Ordering::Relaxed);
        let bytes = self.counters.appended_bytes.load(Ordering::Relaxed);
        if items == 0 {
            return BLOCK_SIZE_BYTES;
        }
        let average = (bytes / items) as usize;
        (average + average / 4).clamp(self.record_align(), FIRST_READ_BYTES_MAX)
    }

    /// What `buf`, read as `plan` says, holds: the record stamped `seq`, or not that record, or
    /// the start of a record longer than the read (and how much to read to hold it).
    pub(super) fn check_read(&self, buf: &[u8], plan: &ReadPlan, seq: u64) -> Checked {
        let skip = plan.skip;
        if buf[skip..skip + STAMP_BYTES] != self.stamp(seq).to_le_bytes() {
            return Checked::Miss;
        }
        let body = skip + STAMP_BYTES;
        let Some(size) = crate::record::declared_size(&buf[body..plan.len]) else {
            return Checked::Miss;
        };
        if body + size <= plan.len {
            Checked::Record(body..body + size)
        } else if body + size > plan.room {
            Checked::Miss
        } else {
            let block = self.read_align();
            Checked::Longer((body + size).next_multiple_of(block).min(plan.room))
        }
    }

    /// Reads the blocks of the record at `offset` of region `index`'s payload: the first block
    /// says the record's length, a second read fetches the rest when it is longer.
    pub(super) fn read_medium(
        &self,
        index: u32,
        offset: usize,
        seq: u64,
        out: &mut AlignedBuf,
        purpose: ReadFor,
    ) -> Option<std::ops::Range<usize>> {
        let block = self.read_align();
        let mut plan = self.plan_read(index, offset);
        for _ in 0..2 {
            if out.len() < plan.len {
                *out = AlignedBuf::zeroed(plan.len, block);
            }
            self.counters.reads.fetch_add(1, Ordering::Relaxed);
            if purpose == ReadFor::Settle {
                self.counters.settle_reads.fetch_add(1, Ordering::Relaxed);
            }
            if !self.read_delay_for_tests.is_zero() {
                std::thread::sleep(self.read_delay_for_tests);
            }
            if self
                .medium
                .read_at(plan.start, &mut out[..plan.len])
                .is_err()
            {
                self.counters.read_errors.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            match self.check_read(out, &plan, seq) {
                Checked::Record(range) => return Some(range),
                Checked::Miss => return None,
                Checked::Longer(len) => plan.len = len,
            }
        }
        None
    }
}
