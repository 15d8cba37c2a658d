//! An item of several records (an owner and its parts: `shard::parts`) as the one flash
//! record it is demoted to: a *bundle*. The flash record is the owner's (its key, kind,
//! expiry, CAS and client flags, its part count in `parts`), and its value is, all integers
//! little-endian (docs/FLASH_FORMAT.md, "Items of several records"):
//!
//! ```text
//!  | version u8 = 1 | owner_len u32 | part_len u32 × parts | owner's value | part 0 | part 1 | ...
//! ```
//!
//! A flash record with `parts > 0` is always a bundle (a single record never owns parts).
//! The parts' values follow each other, so a large string's bytes are one slice of the
//! bundle ([`Bundle::parts_joined`]): a read serves it from flash without joining. The parts'
//! own records carry nothing but their kind, so the bundle keeps only their values.

/// The bundle encoding's version byte.
const VERSION: u8 = 1;
/// Bytes before the part lengths: the version and the owner's value length.
const HEAD_BYTES: usize = 5;

/// The bytes of a bundle of an owner's value and its parts' values.
pub(crate) fn encoded_len(owner_value: &[u8], parts: &[&[u8]]) -> usize {
    HEAD_BYTES + 4 * parts.len() + owner_value.len() + parts.iter().map(|p| p.len()).sum::<usize>()
}

/// Writes the bundle of `owner_value` and `parts` into `out`, exactly
/// [`encoded_len`] bytes.
pub(crate) fn encode_into(out: &mut [u8], owner_value: &[u8], parts: &[&[u8]]) {
    assert_eq!(
        out.len(),
        encoded_len(owner_value, parts),
        "sized by encoded_len"
    );
    out[0] = VERSION;
    let mut at = HEAD_BYTES;
    out[1..at].copy_from_slice(&len_u32(owner_value.len()).to_le_bytes());
    for part in parts {
        out[at..at + 4].copy_from_slice(&len_u32(part.len()).to_le_bytes());
        at += 4;
    }
    for piece in std::iter::once(&owner_value).chain(parts) {
        out[at..at + piece.len()].copy_from_slice(piece);
        at += piece.len();
    }
    debug_assert_eq!(at, out.len());
}

fn len_u32(len: usize) -> u32 {
    u32::try_from(len).expect("a flash record is under 4 GiB")
}

/// A bundle read back: the owner's value and its parts' values, borrowed from the record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bundle<'a> {
    bytes: &'a [u8],
    parts: u32,
    owner_len: usize,
}

impl<'a> Bundle<'a> {
    /// The bundle in a flash record's `value` whose header says it owns `parts` parts;
    /// `None` when the bytes are no such bundle (another version, lengths that do not add up).
    pub(crate) fn parse(bytes: &'a [u8], parts: u32) -> Option<Bundle<'a>> {
        if parts == 0 || *bytes.first()? != VERSION {
            return None;
        }
        let lens_end = HEAD_BYTES.checked_add(4usize.checked_mul(parts as usize)?)?;
        let owner_len = u32_at(bytes, 1)? as usize;
        let mut total = lens_end.checked_add(owner_len)?;
        for part in 0..parts as usize {
            total = total.checked_add(u32_at(bytes, HEAD_BYTES + 4 * part)? as usize)?;
        }
        (total == bytes.len()).then_some(Bundle {
            bytes,
            parts,
            owner_len,
        })
    }

    /// The whole bundle.
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Where the owner's value starts.
    fn owner_at(&self) -> usize {
        HEAD_BYTES + 4 * self.parts as usize
    }

    /// The owner's value (a large string's header, a large hash's chunked header).
    pub(crate) fn owner_value(&self) -> &'a [u8] {
        &self.bytes[self.owner_at()..self.owner_at() + self.owner_len]
    }

    /// The parts' values, joined: the whole of a large string.
    pub(crate) fn parts_joined(&self) -> &'a [u8] {
        &self.bytes[self.owner_at() + self.owner_len..]
    }

    /// How many parts the owner owns.
    pub(crate) fn part_count(&self) -> u32 {
        self.parts
    }

    /// The parts' values in order.
    pub(crate) fn parts(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        let mut at = self.owner_at() + self.owner_len;
        (0..self.parts as usize).map(move |part| {
            let len = u32_at(self.bytes, HEAD_BYTES + 4 * part).expect("checked by parse") as usize;
            let value = &self.bytes[at..at + len];
            at += len;
            value
        })
    }
}

/// The fuzz target `flash_bundle`'s checks, on any bytes: the first byte is a part count, the
/// rest a bundle's bytes. Parsing never panics or reads past them; a bundle it accepts holds
/// the owner's value and exactly that many parts, which tile the bytes after the lengths, whose
/// values joined are [`Bundle::parts_joined`], and which encode back to the very bytes. Then the
/// rest is cut (by its own bytes) into an owner's value and parts that must round-trip.
#[doc(hidden)]
pub fn check_any(data: &[u8]) {
    let Some((&parts, rest)) = data.split_first() else {
        return;
    };
    if let Some(bundle) = Bundle::parse(rest, u32::from(parts)) {
        let values: Vec<&[u8]> = bundle.parts().collect();
        assert_eq!(values.len(), usize::from(parts));
        assert_eq!(bundle.parts_joined(), values.concat());
        let mut again = vec![0; encoded_len(bundle.owner_value(), &values)];
        encode_into(&mut again, bundle.owner_value(), &values);
        assert_eq!(again, rest, "a bundle encodes back to its bytes");
    }
    let mut pieces: Vec<&[u8]> = Vec::new();
    let mut left = rest;
    while let Some((&len, tail)) = left.split_first() {
        let len = usize::from(len).min(tail.len());
        pieces.push(&tail[..len]);
        left = &tail[len..];
    }
    let Some((owner, parts)) = pieces.split_first() else {
        return;
    };
    let mut bytes = vec![0; encoded_len(owner, parts)];
    encode_into(&mut bytes, owner, parts);
    let count = u32::try_from(parts.len()).expect("fewer parts than bytes");
    match Bundle::parse(&bytes, count) {
        Some(bundle) => {
            assert_eq!(bundle.owner_value(), *owner);
            assert!(bundle.parts().eq(parts.iter().copied()));
        }
        None => assert!(parts.is_empty(), "an encoded bundle with parts parses"),
    }
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let field = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(field.try_into().expect("4 bytes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_round_trips_and_lengths_that_do_not_add_up_are_refused() {
        let parts: [&[u8]; 3] = [b"first part", b"", b"third"];
        let mut bytes = vec![0xAA; encoded_len(b"owner", &parts)];
        encode_into(&mut bytes, b"owner", &parts);
        let bundle = Bundle::parse(&bytes, 3).expect("a bundle");
        assert_eq!(bundle.owner_value(), b"owner");
        assert_eq!(bundle.part_count(), 3);
        assert_eq!(bundle.parts().collect::<Vec<_>>(), parts);
        assert_eq!(bundle.parts_joined(), b"first partthird");
        assert!(Bundle::parse(&bytes, 2).is_none(), "another part count");
        assert!(Bundle::parse(&bytes, 0).is_none(), "no parts: no bundle");
        assert!(
            Bundle::parse(&bytes[..bytes.len() - 1], 3).is_none(),
            "short"
        );
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Bundle::parse(&longer, 3).is_none(), "trailing bytes");
        let mut other = bytes.clone();
        other[0] = 2;
        assert!(Bundle::parse(&other, 3).is_none(), "another version");
        let mut huge = bytes;
        huge[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Bundle::parse(&huge, 3).is_none(), "an owner past the end");
        assert!(
            Bundle::parse(&[1, 0, 0, 0, 0], u32::MAX).is_none(),
            "no room for lengths"
        );
    }
}
