//! Where a cache shard keeps its lines: DRAM, or segments of a strata pool (`--cache PATH`),
//! where each line's slot has a 32-byte entry naming the line and its version and checksumming
//! its bytes, so a restart finds the lines again and a slot whose bytes do not match its entry
//! (a crash between the two writes, or damage) is dropped, never served.
//!
//! A pool segment's data: the entry table (32 bytes per slot, padded to 4 KiB), then the slots.
//! An entry (all little-endian): line number (u64; all ones: empty), version (u64: the cache's
//! store sequence when the slot was written; of two slots naming one line, the higher wins),
//! CRC32C of the slot's bytes (u32), flags (u32: bit 0 dirty, the backing store does not have
//! these bytes yet), zero (u32), CRC32C of the first 28 bytes (u32). All zeroes (a new pool)
//! fails its own CRC: empty. An entry lies inside one 64-byte cache line of the pool.

use strata_pool::Segment;

/// Bytes of one entry.
pub const ENTRY_BYTES: usize = 32;
/// The entry flag of a dirty line.
const FLAG_DIRTY: u32 = 1;
/// The entry table is padded to this.
const TABLE_ALIGN_BYTES: usize = 4096;
/// No line.
pub const EMPTY_LINE: u64 = u64::MAX;

/// A shard's slots.
#[derive(Debug)]
pub enum Slots {
    /// Lines in DRAM only.
    Dram {
        /// `count × line_bytes` bytes.
        bytes: Vec<u8>,
    },
    /// Lines in pool segments, with their entries.
    Pool {
        /// The segments, each `per_segment` slots after its table.
        segments: Vec<Segment>,
        /// Slots in each segment.
        per_segment: usize,
        /// Bytes of each segment's entry table.
        table_bytes: usize,
    },
}

/// Slots a pool segment of `segment_bytes` holds for `line_bytes` lines, and its table's size.
pub fn segment_layout(segment_bytes: usize, line_bytes: usize) -> (usize, usize) {
    let mut slots = segment_bytes / (line_bytes + ENTRY_BYTES);
    loop {
        let table = (slots * ENTRY_BYTES).div_ceil(TABLE_ALIGN_BYTES) * TABLE_ALIGN_BYTES;
        if table + slots * line_bytes <= segment_bytes || slots == 0 {
            return (slots, table);
        }
        slots -= 1;
    }
}

impl Slots {
    /// Slots in all.
    pub fn count(&self, line_bytes: usize) -> usize {
        match self {
            Slots::Dram { bytes } => bytes.len() / line_bytes.max(1),
            Slots::Pool {
                segments,
                per_segment,
                ..
            } => segments.len() * per_segment,
        }
    }

    /// A slot's bytes.
    pub fn slot(&self, slot: usize, line_bytes: usize) -> &[u8] {
        match self {
            Slots::Dram { bytes } => &bytes[slot * line_bytes..(slot + 1) * line_bytes],
            Slots::Pool {
                segments,
                per_segment,
                table_bytes,
            } => {
                let at = table_bytes + (slot % per_segment) * line_bytes;
                &segments[slot / per_segment].data()[at..at + line_bytes]
            }
        }
    }

    /// Puts `data` in a slot and names it `line` at `version` (dirty or not) in the slot's
    /// entry (after the bytes: a crash between the two leaves an entry whose checksum the bytes
    /// fail).
    pub fn store(&mut self, slot: usize, entry: Entry, data: &[u8]) {
        let line_bytes = data.len();
        match self {
            Slots::Dram { bytes } => {
                bytes[slot * line_bytes..(slot + 1) * line_bytes].copy_from_slice(data)
            }
            Slots::Pool {
                segments,
                per_segment,
                table_bytes,
            } => {
                let segment = &mut segments[slot / *per_segment];
                let index = slot % *per_segment;
                let at = *table_bytes + index * line_bytes;
                segment.data_mut()[at..at + line_bytes].copy_from_slice(data);
                write_entry(segment, index, entry, crc32c::crc32c(data));
            }
        }
    }

    /// Rewrites a slot's entry as clean (the backing store has its bytes now). An entry torn by
    /// a crash here fails its CRC and the line is dropped: the store has it.
    pub fn mark_clean(&mut self, slot: usize) {
        if let Slots::Pool {
            segments,
            per_segment,
            ..
        } = self
        {
            let segment = &mut segments[slot / *per_segment];
            let index = slot % *per_segment;
            if let Some((entry, data_crc)) = read_entry(&segment.data()[index * ENTRY_BYTES..]) {
                let clean = Entry {
                    dirty: false,
                    ..entry
                };
                write_entry(segment, index, clean, data_crc);
            }
        }
    }

    /// Makes a slot's bytes and entry durable (a write with FUA in write-back). Nothing to do
    /// in DRAM.
    pub fn persist(&self, slot: usize, line_bytes: usize) -> Result<(), String> {
        if let Slots::Pool {
            segments,
            per_segment,
            table_bytes,
        } = self
        {
            let segment = &segments[slot / *per_segment];
            let index = slot % *per_segment;
            segment
                .persist_data(*table_bytes + index * line_bytes, line_bytes)
                .and_then(|()| segment.persist_data(index * ENTRY_BYTES, ENTRY_BYTES))
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Empties a slot's entry (the line was invalidated or evicted).
    pub fn clear(&mut self, slot: usize) {
        if let Slots::Pool {
            segments,
            per_segment,
            ..
        } = self
        {
            let empty = Entry {
                line: EMPTY_LINE,
                version: 0,
                dirty: false,
            };
            write_entry(
                &mut segments[slot / *per_segment],
                slot % *per_segment,
                empty,
                0,
            );
        }
    }

    /// The slots whose entry names a line and whose bytes match it: `(slot, entry)`; and how
    /// many dirty entries had bytes that failed their CRC (a write torn by a crash, or damage).
    pub fn valid_entries(&self, line_bytes: usize) -> (Vec<(usize, Entry)>, u64) {
        let Slots::Pool {
            segments,
            per_segment,
            table_bytes,
        } = self
        else {
            return (Vec::new(), 0);
        };
        let mut out = Vec::new();
        let mut dirty_failed = 0;
        for (s, segment) in segments.iter().enumerate() {
            let data = segment.data();
            for index in 0..*per_segment {
                let Some((entry, data_crc)) = read_entry(&data[index * ENTRY_BYTES..]) else {
                    continue;
                };
                let at = table_bytes + index * line_bytes;
                if entry.line == EMPTY_LINE {
                    continue;
                }
                if crc32c::crc32c(&data[at..at + line_bytes]) == data_crc {
                    out.push((s * per_segment + index, entry));
                } else if entry.dirty {
                    dirty_failed += 1;
                }
            }
        }
        (out, dirty_failed)
    }

    /// Empties every entry (a cache discarded at open).
    pub fn clear_all(&mut self) {
        if let Slots::Pool {
            segments,
            table_bytes,
            ..
        } = self
        {
            for segment in segments {
                segment.data_mut()[..*table_bytes].fill(0);
            }
        }
    }
}

/// What a slot's entry says of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The line's number in the store.
    pub line: u64,
    /// The cache's store sequence when the slot was written (the higher of two wins).
    pub version: u64,
    /// The backing store does not have these bytes yet.
    pub dirty: bool,
}

fn write_entry(segment: &mut Segment, index: usize, entry: Entry, data_crc: u32) {
    let mut bytes = [0u8; ENTRY_BYTES];
    bytes[0..8].copy_from_slice(&entry.line.to_le_bytes());
    bytes[8..16].copy_from_slice(&entry.version.to_le_bytes());
    bytes[16..20].copy_from_slice(&data_crc.to_le_bytes());
    let flags = if entry.dirty { FLAG_DIRTY } else { 0 };
    bytes[20..24].copy_from_slice(&flags.to_le_bytes());
    let own = crc32c::crc32c(&bytes[0..28]);
    bytes[28..32].copy_from_slice(&own.to_le_bytes());
    segment.data_mut()[index * ENTRY_BYTES..(index + 1) * ENTRY_BYTES].copy_from_slice(&bytes);
}

/// An entry and its data CRC, if its own CRC holds.
fn read_entry(bytes: &[u8]) -> Option<(Entry, u32)> {
    let bytes = &bytes[..ENTRY_BYTES];
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if crc32c::crc32c(&bytes[0..28]) != u32_at(28) {
        return None;
    }
    let entry = Entry {
        line: u64_at(0),
        version: u64_at(8),
        dirty: u32_at(20) & FLAG_DIRTY != 0,
    };
    Some((entry, u32_at(16)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_holds_its_table_and_as_many_slots_as_fit() {
        assert_eq!(segment_layout(256 << 10, 4096), (63, 4096));
        assert_eq!(segment_layout(1 << 20, 4096), (254, 8192));
        assert_eq!(segment_layout(1 << 20, 65536), (15, 4096));
        let (slots, table) = segment_layout(256 << 10, 8192);
        assert!(table + slots * 8192 <= 256 << 10 && slots == 31);
    }

    #[test]
    fn entries_check_themselves() {
        let mut bytes = [0u8; ENTRY_BYTES];
        assert_eq!(read_entry(&bytes), None, "zeroes are empty");
        bytes[0..8].copy_from_slice(&7u64.to_le_bytes());
        bytes[8..16].copy_from_slice(&11u64.to_le_bytes());
        bytes[16..20].copy_from_slice(&9u32.to_le_bytes());
        bytes[20..24].copy_from_slice(&FLAG_DIRTY.to_le_bytes());
        let own = crc32c::crc32c(&bytes[0..28]);
        bytes[28..32].copy_from_slice(&own.to_le_bytes());
        let entry = Entry {
            line: 7,
            version: 11,
            dirty: true,
        };
        assert_eq!(read_entry(&bytes), Some((entry, 9)));
        bytes[3] ^= 1;
        assert_eq!(read_entry(&bytes), None);
    }
}
