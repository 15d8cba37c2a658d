//! Human sizes for the configuration: `256MiB`, `4GiB`, `64mb`, `1048576`.
//!
//! Units follow Redis's configuration file, so a Redis user's numbers mean the same here:
//! `k`, `m`, `g` are powers of 1000 and `kb`, `mb`, `gb` (and the IEC `KiB`, `MiB`, `GiB`)
//! are powers of 1024. Case does not matter; a space between number and unit is allowed.

use std::fmt;
use std::str::FromStr;

/// A size in bytes, parsed from a number with an optional unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

/// Units and their multipliers, longest spelling first so that `kib` is not read as `k`.
const UNITS: &[(&str, u64)] = &[
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
    ("kb", 1 << 10),
    ("mb", 1 << 20),
    ("gb", 1 << 30),
    ("tb", 1 << 40),
    ("k", 1_000),
    ("m", 1_000_000),
    ("g", 1_000_000_000),
    ("t", 1_000_000_000_000),
    ("b", 1),
];

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let digits_end = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(digits_end);
        let number: u64 = number.parse().map_err(|_| {
            format!(
                "`{text}` is not a size: expected a number with an optional unit \
                 (256MiB, 4GiB, 64mb)"
            )
        })?;
        let unit = unit.trim().to_ascii_lowercase();
        let multiplier = if unit.is_empty() {
            1
        } else {
            UNITS
                .iter()
                .find(|(name, _)| *name == unit)
                .map(|&(_, multiplier)| multiplier)
                .ok_or_else(|| {
                    format!(
                        "`{text}` has an unknown unit `{unit}`: use B, KiB, MiB, GiB, kb, mb, \
                         gb, k, m or g"
                    )
                })?
        };
        number
            .checked_mul(multiplier)
            .map(ByteSize)
            .ok_or_else(|| format!("`{text}` is too large"))
    }
}

/// Smallest bare number (no unit) a memory budget, flash file or cache is given in: below it
/// the number is taken for a slip (memcached's `-m 64` means 64 MiB, Redis's `maxmemory 64`
/// 64 bytes).
pub const BUDGET_BARE_BYTES_MIN: u64 = 1 << 20;

/// Parses a budget (`--memory`, `--flash-size`, `--cache-size`): a size as [`ByteSize`]
/// parses it, except that a number without a unit under [`BUDGET_BARE_BYTES_MIN`] is refused
/// with what was likely meant (`64 is 64 bytes, under 1 MiB ... did you mean 64MiB?`). With a
/// unit, any size is taken (`512KiB`).
pub fn parse_budget(text: &str) -> Result<ByteSize, String> {
    let size: ByteSize = text.parse()?;
    let bare = text.trim().chars().all(|c| c.is_ascii_digit());
    if bare && size.0 < BUDGET_BARE_BYTES_MIN {
        return Err(format!(
            "{} is {} bytes, under 1 MiB (a number without a unit counts bytes, as in Redis's \
             configuration): did you mean {}MiB?",
            text.trim(),
            size.0,
            size.0
        ));
    }
    Ok(size)
}

impl fmt::Display for ByteSize {
    /// The largest binary unit that divides the size exactly: `1 MiB`, `1536 KiB`, `100 B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if self.0 != 0 && self.0.trailing_zeros() >= shift {
                return write!(f, "{} {unit}", self.0 >> shift);
            }
        }
        write!(f, "{} B", self.0)
    }
}

impl<'de> serde::Deserialize<'de> for ByteSize {
    /// A TOML string (`"256MiB"`) or a plain integer of bytes.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Bytes(bytes) => Ok(ByteSize(bytes)),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_bare_budget_under_a_mebibyte_is_a_slip_with_a_hint() {
        let slip = super::parse_budget("64").unwrap_err();
        assert!(slip.contains("did you mean 64MiB?"), "{slip}");
        assert!(slip.starts_with("64 is 64 bytes, under 1 MiB"), "{slip}");
        assert_eq!(super::parse_budget("512KiB"), Ok(ByteSize(512 << 10)));
        assert_eq!(super::parse_budget("1048576"), Ok(ByteSize(1 << 20)));
        assert_eq!(super::parse_budget("64MiB"), Ok(ByteSize(64 << 20)));
        assert!(super::parse_budget("lots").is_err());
    }

    use super::ByteSize;

    #[test]
    fn accepted() {
        for (text, bytes) in [
            ("0", 0),
            ("1048576", 1 << 20),
            ("256MiB", 256 << 20),
            ("4GiB", 4 << 30),
            ("4gib", 4 << 30),
            ("64mb", 64 << 20),
            ("64MB", 64 << 20),
            ("1k", 1000),
            ("1kb", 1024),
            ("2 MiB", 2 << 20),
            ("10b", 10),
            (" 3m ", 3_000_000),
        ] {
            assert_eq!(text.parse::<ByteSize>(), Ok(ByteSize(bytes)), "{text}");
        }
    }

    #[test]
    fn rejected() {
        for text in [
            "",
            "MiB",
            "-1",
            "1.5GiB",
            "12xb",
            "99999999999999999999",
            "16777216TiB",
        ] {
            assert!(text.parse::<ByteSize>().is_err(), "{text}");
        }
    }

    #[test]
    fn displayed_in_the_largest_exact_unit() {
        assert_eq!(ByteSize(1 << 20).to_string(), "1 MiB");
        assert_eq!(ByteSize(1536 << 10).to_string(), "1536 KiB");
        assert_eq!(ByteSize(100).to_string(), "100 B");
        assert_eq!(ByteSize(0).to_string(), "0 B");
    }
}
