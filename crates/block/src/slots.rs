//! Where a cache shard keeps its lines: DRAM, or segments of a strata pool (`--cache PATH`),
//! where each line's slot has a 16-byte entry naming the line and checksumming its bytes, so a
//! restart finds the lines again and a slot whose bytes do not match its entry (a crash between
//! the two writes, or damage) is dropped, never served.
//!
//! A pool segment's data: the entry table (16 bytes per slot, padded to 4 KiB), then the slots.
//! An entry: line number (u64 LE; all ones: empty), CRC32C of the slot's bytes (u32 LE), CRC32C
//! of the first 12 bytes (u32 LE). All zeroes (a new pool) fails its own CRC: empty.

use strata_pool::Segment;

/// Bytes of one entry.
pub const ENTRY_BYTES: usize = 16;
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

    /// Puts `data` in a slot and names it `line` in the slot's entry (after the bytes: a crash
    /// between the two leaves an entry whose checksum the bytes fail).
    pub fn store(&mut self, slot: usize, line: u64, data: &[u8]) {
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
                write_entry(segment, index, line, crc32c::crc32c(data));
            }
        }
    }

    /// Empties a slot's entry (the line was invalidated or evicted).
    pub fn clear(&mut self, slot: usize) {
        if let Slots::Pool {
            segments,
            per_segment,
            ..
        } = self
        {
            write_entry(
                &mut segments[slot / *per_segment],
                slot % *per_segment,
                EMPTY_LINE,
                0,
            );
        }
    }

    /// The slots whose entry names a line and whose bytes match it: `(slot, line)`.
    pub fn valid_entries(&self, line_bytes: usize) -> Vec<(usize, u64)> {
        let Slots::Pool {
            segments,
            per_segment,
            table_bytes,
        } = self
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (s, segment) in segments.iter().enumerate() {
            let data = segment.data();
            for index in 0..*per_segment {
                let Some((line, data_crc)) = read_entry(&data[index * ENTRY_BYTES..]) else {
                    continue;
                };
                let at = table_bytes + index * line_bytes;
                if line != EMPTY_LINE && crc32c::crc32c(&data[at..at + line_bytes]) == data_crc {
                    out.push((s * per_segment + index, line));
                }
            }
        }
        out
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

fn write_entry(segment: &mut Segment, index: usize, line: u64, data_crc: u32) {
    let mut entry = [0u8; ENTRY_BYTES];
    entry[0..8].copy_from_slice(&line.to_le_bytes());
    entry[8..12].copy_from_slice(&data_crc.to_le_bytes());
    let own = crc32c::crc32c(&entry[0..12]);
    entry[12..16].copy_from_slice(&own.to_le_bytes());
    segment.data_mut()[index * ENTRY_BYTES..(index + 1) * ENTRY_BYTES].copy_from_slice(&entry);
}

/// An entry's line and data CRC, if its own CRC holds.
fn read_entry(bytes: &[u8]) -> Option<(u64, u32)> {
    let entry = &bytes[..ENTRY_BYTES];
    let own = u32::from_le_bytes(entry[12..16].try_into().expect("4 bytes"));
    if crc32c::crc32c(&entry[0..12]) != own {
        return None;
    }
    Some((
        u64::from_le_bytes(entry[0..8].try_into().expect("8 bytes")),
        u32::from_le_bytes(entry[8..12].try_into().expect("4 bytes")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_holds_its_table_and_as_many_slots_as_fit() {
        assert_eq!(segment_layout(256 << 10, 4096), (63, 4096));
        assert_eq!(segment_layout(1 << 20, 4096), (255, 4096));
        assert_eq!(segment_layout(1 << 20, 65536), (15, 4096));
        let (slots, table) = segment_layout(256 << 10, 8192);
        assert!(table + slots * 8192 <= 256 << 10 && slots == 31);
    }

    #[test]
    fn entries_check_themselves() {
        let mut bytes = [0u8; ENTRY_BYTES];
        assert_eq!(read_entry(&bytes), None, "zeroes are empty");
        bytes[0..8].copy_from_slice(&7u64.to_le_bytes());
        bytes[8..12].copy_from_slice(&9u32.to_le_bytes());
        let own = crc32c::crc32c(&bytes[0..12]);
        bytes[12..16].copy_from_slice(&own.to_le_bytes());
        assert_eq!(read_entry(&bytes), Some((7, 9)));
        bytes[3] ^= 1;
        assert_eq!(read_entry(&bytes), None);
    }
}
