//! Finding a command by its name in any case, without lowering it first.
//!
//! An open-addressing table of row numbers, built once from [`COMMANDS`]. A name is hashed
//! with every byte ORed with 0x20, which maps each ASCII letter's two cases to one byte, so the
//! hash ignores case without a lowered copy; bytes that differ only in that bit (`_` and DEL,
//! say) hash alike too, and the comparison with the row's name after the probe
//! (`eq_ignore_ascii_case`) tells them apart. The table has more than four slots per row, so
//! a probe usually ends at its first slot. It replaces a lowered copy, FNV-1a and the
//! standard `HashMap`: callgrind counting inside `table::lookup` only (so the count does not
//! move with how requests fall into batches), pipelined HSET, 224 instructions a lookup
//! before and 164 after; most of what is left is the per-byte loops of the hash and the
//! comparison.

use std::sync::OnceLock;

use strata_protocol::resp::COMMAND_NAME_LEN_MAX;

use super::{Command, COMMANDS};

/// Slots of the index: a power of two, more than four per row.
const SLOTS: usize = 1 << 11;

/// Row number plus one per slot; 0 is an empty slot.
struct NameIndex([u16; SLOTS]);

/// The row named `name` in any case, or `None` (also for a name longer than any row's, which
/// costs no more than a row's length to refuse).
pub(super) fn find(name: &[u8]) -> Option<&'static Command> {
    if name.len() > COMMAND_NAME_LEN_MAX {
        return None;
    }
    let slots = &index().0;
    let mut slot = slot_of(name);
    loop {
        let row = usize::from(slots[slot]).checked_sub(1)?;
        let command = &COMMANDS[row];
        if command.name.as_bytes().eq_ignore_ascii_case(name) {
            return Some(command);
        }
        slot = (slot + 1) % SLOTS;
    }
}

fn index() -> &'static NameIndex {
    static INDEX: OnceLock<NameIndex> = OnceLock::new();
    INDEX.get_or_init(|| {
        assert!(
            COMMANDS.len() * 4 < SLOTS,
            "room for every row, probes short"
        );
        let mut slots = [0u16; SLOTS];
        for (row, command) in COMMANDS.iter().enumerate() {
            let mut slot = slot_of(command.name.as_bytes());
            while slots[slot] != 0 {
                slot = (slot + 1) % SLOTS;
            }
            slots[slot] = u16::try_from(row + 1).expect("fewer rows than u16::MAX");
        }
        NameIndex(slots)
    })
}

/// The first slot `name` probes: its bytes ORed with 0x20, eight to a word, each word mixed
/// into the hash with a multiply (Fibonacci hashing), the top bits the slot.
fn slot_of(name: &[u8]) -> usize {
    const CASE_BITS: u64 = 0x2020_2020_2020_2020;
    const MIX: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut hash = name.len() as u64;
    for chunk in name.chunks(8) {
        let mut word = 0u64;
        for (i, &byte) in chunk.iter().enumerate() {
            word |= u64::from(byte) << (8 * i);
        }
        hash = (hash ^ (word | CASE_BITS)).wrapping_mul(MIX);
    }
    (hash >> (64 - SLOTS.trailing_zeros())) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_found_by_its_name_in_any_case() {
        for command in COMMANDS {
            let lower = command.name;
            let upper = lower.to_ascii_uppercase();
            let mixed: String = lower
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if i % 2 == 0 {
                        c.to_ascii_uppercase()
                    } else {
                        c
                    }
                })
                .collect();
            for name in [lower, &upper, &mixed] {
                let found = find(name.as_bytes()).map(|c| c.name);
                assert_eq!(found, Some(lower), "{name}");
            }
        }
    }

    #[test]
    fn names_near_a_row_are_not_found() {
        for command in COMMANDS {
            let name = command.name.as_bytes();
            // One byte flipped in bit 0x20 where that is not a case change, one byte more,
            // one byte less, and a byte at either end.
            for i in 0..name.len() {
                let mut near = name.to_vec();
                near[i] ^= 0x20;
                if !near[i].is_ascii_alphabetic() {
                    assert!(find(&near).is_none(), "{near:?} for {}", command.name);
                }
            }
            for near in [
                [name, b"x"].concat(),
                [b"x", name].concat(),
                name[..name.len() - 1].to_vec(),
                [name, b"\0"].concat(),
            ] {
                let found = find(&near).map(|c| c.name);
                assert!(
                    found.is_none() || found.map(str::as_bytes) == Some(&near[..]),
                    "{near:?} found {found:?}"
                );
            }
        }
        assert!(find(b"").is_none());
        assert!(find(&[b'g'; COMMAND_NAME_LEN_MAX + 1]).is_none());
        assert!(find(&vec![b'a'; 1 << 20]).is_none());
    }
}
