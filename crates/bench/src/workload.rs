//! What the generator asks for: the key space, key popularity, key and value sizes, the
//! GET:SET mix, multi-get batch size and TTL.
//!
//! Keys are `k` followed by the key's index in decimal, zero-padded to the key's length, so
//! key `i` is the same bytes in every run, on every thread, and in the preload and read-back
//! phases. A key's length is a pure function of its index.
//!
//! Invariants: every key index is `< keys_count`; every key is `key_size.min..=key_size.max`
//! bytes; every value is `value_size.min..=value_size.max` bytes.

use std::fmt;
use std::str::FromStr;

use rand::rngs::SmallRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::zipf::Zipf;

/// memcached refuses keys longer than this; Redis would take more, but one limit keeps
/// workloads portable across protocols.
pub const KEY_LEN_MAX: usize = 250;
/// The largest value the generator offers (memcached's default item size limit is 1 MiB).
pub const VALUE_LEN_MAX: usize = 1024 * 1024;
/// The most keys one multi-get asks for.
pub const BATCH_KEYS_MAX: usize = 1000;

/// How popular each key is.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Key `i` (0-based) has weight `(i + 1)^-s`.
    Zipf(f64),
}

impl FromStr for KeyDist {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "uniform" => Ok(KeyDist::Uniform),
            "zipf" => Ok(KeyDist::Zipf(0.99)),
            _ => {
                let exponent = text
                    .strip_prefix("zipf:")
                    .and_then(|s| s.parse::<f64>().ok())
                    .ok_or_else(|| format!("expected uniform, zipf or zipf:S, got {text:?}"))?;
                if exponent.is_finite() && exponent > 0.0 {
                    Ok(KeyDist::Zipf(exponent))
                } else {
                    Err(format!("zipf exponent must be > 0, got {exponent}"))
                }
            }
        }
    }
}

impl fmt::Display for KeyDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDist::Uniform => write!(f, "uniform"),
            KeyDist::Zipf(s) => write!(f, "zipf:{s}"),
        }
    }
}

/// A size in bytes, fixed (`64`) or drawn uniformly from an inclusive range (`64-128`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeRange {
    /// The smallest size, in bytes.
    pub min: usize,
    /// The largest size, in bytes (inclusive).
    pub max: usize,
}

impl SizeRange {
    /// A fixed size.
    #[must_use]
    pub fn fixed(size: usize) -> Self {
        SizeRange {
            min: size,
            max: size,
        }
    }
}

impl FromStr for SizeRange {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let parse = |s: &str| s.trim().parse::<usize>().map_err(|e| format!("{s:?}: {e}"));
        let (min, max) = match text.split_once('-') {
            Some((lo, hi)) => (parse(lo)?, parse(hi)?),
            None => (parse(text)?, parse(text)?),
        };
        if min == 0 || min > max {
            return Err(format!(
                "size range {text:?} must be N or MIN-MAX with 0 < MIN <= MAX"
            ));
        }
        Ok(SizeRange { min, max })
    }
}

impl fmt::Display for SizeRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

/// The GET:SET mix, e.g. `9:1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ratio {
    /// Relative weight of GET requests.
    pub get: u32,
    /// Relative weight of SET requests.
    pub set: u32,
}

impl FromStr for Ratio {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (get, set) = text
            .split_once(':')
            .ok_or_else(|| format!("expected GET:SET, got {text:?}"))?;
        let get = get
            .trim()
            .parse::<u32>()
            .map_err(|e| format!("{get:?}: {e}"))?;
        let set = set
            .trim()
            .parse::<u32>()
            .map_err(|e| format!("{set:?}: {e}"))?;
        if !matches!(get.checked_add(set), Some(total) if total > 0) {
            return Err(format!("ratio {text:?} needs a positive total"));
        }
        Ok(Ratio { get, set })
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.get, self.set)
    }
}

/// One request's verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Read one key or a batch of keys.
    Get,
    /// Write one key.
    Set,
}

/// The key space: which bytes key `i` is.
#[derive(Debug, Clone)]
pub struct KeySpace {
    keys_count: u64,
    key_size: SizeRange,
}

impl KeySpace {
    /// A key space of `keys_count` keys sized by `key_size`.
    ///
    /// # Errors
    /// If the shortest key cannot hold `k` plus the largest index, or a key exceeds
    /// [`KEY_LEN_MAX`].
    pub fn new(keys_count: u64, key_size: SizeRange) -> Result<Self, BenchError> {
        if keys_count == 0 {
            return Err(BenchError::Config(
                "keyspace must hold at least one key".into(),
            ));
        }
        let digits = decimal_digits(keys_count - 1);
        if key_size.min < digits + 1 || key_size.max > KEY_LEN_MAX {
            return Err(BenchError::Config(format!(
                "key size {key_size} must be {}..={KEY_LEN_MAX} bytes for {keys_count} keys",
                digits + 1
            )));
        }
        Ok(KeySpace {
            keys_count,
            key_size,
        })
    }

    /// The number of distinct keys.
    #[must_use]
    pub fn keys_count(&self) -> u64 {
        self.keys_count
    }

    /// The length of key `index`, in bytes: a pure function of the index.
    #[must_use]
    pub fn key_len(&self, index: u64) -> usize {
        let span = (self.key_size.max - self.key_size.min) as u64 + 1;
        // span <= KEY_LEN_MAX, so the remainder fits in usize.
        self.key_size.min + usize::try_from(splitmix64(index) % span).unwrap_or(0)
    }

    /// Appends key `index` to `out`.
    pub fn write_key(&self, index: u64, out: &mut Vec<u8>) {
        assert!(index < self.keys_count, "key index {index} out of range");
        let len = self.key_len(index);
        out.push(b'k');
        let digits = decimal_digits(index);
        out.resize(out.len() + len - 1 - digits, b'0');
        push_decimal(out, index);
    }
}

/// Key indices and value sizes for a stream of requests.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Which bytes each key is.
    pub keys: KeySpace,
    zipf: Option<Zipf>,
    value_size: SizeRange,
    values: Vec<u8>,
    ratio: Ratio,
    /// Keys per GET request (1 is a plain GET).
    pub batch_keys: usize,
    /// Expiry sent with every SET, in seconds (0: never).
    pub ttl_secs: u32,
}

/// Everything [`Workload::new`] needs.
#[derive(Debug, Clone)]
pub struct WorkloadSpec {
    /// Number of distinct keys.
    pub keys_count: u64,
    /// Key popularity.
    pub key_dist: KeyDist,
    /// Key length in bytes.
    pub key_size: SizeRange,
    /// Value length in bytes.
    pub value_size: SizeRange,
    /// GET:SET mix.
    pub ratio: Ratio,
    /// Keys per GET.
    pub batch_keys: usize,
    /// Expiry on SETs, in seconds (0: never).
    pub ttl_secs: u32,
    /// Seeds the value bytes.
    pub seed: u64,
}

impl Workload {
    /// Builds a workload and its value bytes.
    ///
    /// # Errors
    /// On sizes or batch counts outside the named limits.
    pub fn new(spec: &WorkloadSpec) -> Result<Self, BenchError> {
        let keys = KeySpace::new(spec.keys_count, spec.key_size)?;
        if spec.value_size.max > VALUE_LEN_MAX {
            return Err(BenchError::Config(format!(
                "values are at most {VALUE_LEN_MAX} bytes"
            )));
        }
        if spec.batch_keys == 0 || spec.batch_keys > BATCH_KEYS_MAX {
            return Err(BenchError::Config(format!(
                "multi-get is 1..={BATCH_KEYS_MAX} keys"
            )));
        }
        let zipf = match spec.key_dist {
            KeyDist::Uniform => None,
            KeyDist::Zipf(s) => Some(Zipf::new(spec.keys_count, s)),
        };
        let mut rng = <SmallRng as rand::SeedableRng>::seed_from_u64(spec.seed ^ 0x5eed);
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let values = (0..spec.value_size.max)
            .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())])
            .collect();
        Ok(Workload {
            keys,
            zipf,
            value_size: spec.value_size,
            values,
            ratio: spec.ratio,
            batch_keys: spec.batch_keys,
            ttl_secs: spec.ttl_secs,
        })
    }

    /// Draws the next request's verb from the GET:SET mix.
    pub fn next_op(&self, rng: &mut SmallRng) -> OpKind {
        let total = self.ratio.get + self.ratio.set;
        if rng.gen_range(0..total) < self.ratio.get {
            OpKind::Get
        } else {
            OpKind::Set
        }
    }

    /// Keys one request of kind `op` names: `batch_keys` for a GET, 1 for a SET.
    #[must_use]
    pub fn keys_per(&self, op: OpKind) -> usize {
        match op {
            OpKind::Get => self.batch_keys,
            OpKind::Set => 1,
        }
    }

    /// Draws one key index from the popularity distribution.
    pub fn sample_key(&self, rng: &mut SmallRng) -> u64 {
        match &self.zipf {
            None => rng.gen_range(0..self.keys.keys_count()),
            Some(zipf) => zipf.sample(rng) - 1,
        }
    }

    /// Draws a value: printable bytes of a length within the value size range.
    pub fn value(&self, rng: &mut SmallRng) -> &[u8] {
        let len = rng.gen_range(self.value_size.min..=self.value_size.max);
        &self.values[..len]
    }
}

/// The keys of one request, formatted back to back without per-request allocation.
#[derive(Debug, Default)]
pub struct KeyBatch {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl KeyBatch {
    /// Empties the batch, keeping its capacity.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Appends key `index` of `keys`.
    pub fn push(&mut self, keys: &KeySpace, index: u64) {
        keys.write_key(index, &mut self.bytes);
        self.ends.push(self.bytes.len());
    }

    /// The number of keys.
    #[must_use]
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when the batch holds no key.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The keys in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(start, end)| &self.bytes[start..end])
    }
}

/// Appends `value` in decimal.
pub fn push_decimal(out: &mut Vec<u8>, mut value: u64) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    loop {
        start -= 1;
        // value % 10 < 10, so the cast cannot truncate.
        digits[start] = b'0' + u8::try_from(value % 10).unwrap_or(0);
        value /= 10;
        if value == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
}

/// How many decimal digits `value` has (1 for zero).
pub(crate) fn decimal_digits(value: u64) -> usize {
    value.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// SplitMix64's finaliser: a cheap, well-mixed hash of a key index.
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn spec() -> WorkloadSpec {
        WorkloadSpec {
            keys_count: 1000,
            key_dist: KeyDist::Uniform,
            key_size: SizeRange::fixed(16),
            value_size: "10-20".parse().unwrap(),
            ratio: "9:1".parse().unwrap(),
            batch_keys: 1,
            ttl_secs: 0,
            seed: 1,
        }
    }

    #[test]
    fn keys_are_padded_decimal() {
        let keys = KeySpace::new(1000, SizeRange::fixed(8)).unwrap();
        let mut out = Vec::new();
        keys.write_key(42, &mut out);
        assert_eq!(out, b"k0000042");
        out.clear();
        keys.write_key(0, &mut out);
        assert_eq!(out, b"k0000000");
    }

    #[test]
    fn key_lengths_stay_in_range_and_are_stable() {
        let keys = KeySpace::new(100_000, "8-32".parse().unwrap()).unwrap();
        let mut seen = std::collections::HashSet::new();
        let mut lengths = std::collections::HashSet::new();
        for index in 0..100_000 {
            let mut out = Vec::new();
            keys.write_key(index, &mut out);
            assert_eq!(out.len(), keys.key_len(index));
            assert!((8..=32).contains(&out.len()));
            lengths.insert(out.len());
            assert!(seen.insert(out), "keys are distinct");
        }
        assert_eq!(lengths.len(), 25, "every length in the range occurs");
    }

    #[test]
    fn key_space_rejects_short_keys() {
        assert!(KeySpace::new(100_000, SizeRange::fixed(5)).is_err());
        assert!(KeySpace::new(100_000, SizeRange::fixed(6)).is_ok());
        assert!(KeySpace::new(10, SizeRange::fixed(251)).is_err());
        assert!(KeySpace::new(0, SizeRange::fixed(8)).is_err());
    }

    #[test]
    fn values_and_mix_follow_the_spec() {
        let workload = Workload::new(&spec()).unwrap();
        let mut rng = SmallRng::seed_from_u64(5);
        let mut gets = 0;
        for _ in 0..100_000 {
            let value = workload.value(&mut rng);
            assert!((10..=20).contains(&value.len()));
            assert!(value.iter().all(u8::is_ascii_alphanumeric));
            assert!(workload.sample_key(&mut rng) < 1000);
            gets += usize::from(workload.next_op(&mut rng) == OpKind::Get);
        }
        assert!((89_000..=91_000).contains(&gets), "{gets}");
    }

    #[test]
    fn parses_user_strings() {
        assert_eq!("64".parse::<SizeRange>().unwrap(), SizeRange::fixed(64));
        assert_eq!(
            "1-9".parse::<SizeRange>().unwrap(),
            SizeRange { min: 1, max: 9 }
        );
        assert!("9-1".parse::<SizeRange>().is_err());
        assert!("0".parse::<SizeRange>().is_err());
        assert_eq!("zipf:1.1".parse::<KeyDist>().unwrap(), KeyDist::Zipf(1.1));
        assert_eq!("zipf".parse::<KeyDist>().unwrap(), KeyDist::Zipf(0.99));
        assert!("zipf:-1".parse::<KeyDist>().is_err());
        assert_eq!("1:0".parse::<Ratio>().unwrap(), Ratio { get: 1, set: 0 });
        assert!("0:0".parse::<Ratio>().is_err());
        assert_eq!("9:1".parse::<Ratio>().unwrap().to_string(), "9:1");
    }

    #[test]
    fn key_batch_iterates_in_order() {
        let keys = KeySpace::new(100, SizeRange::fixed(4)).unwrap();
        let mut batch = KeyBatch::default();
        for index in [3, 1, 99] {
            batch.push(&keys, index);
        }
        let collected: Vec<&[u8]> = batch.iter().collect();
        assert_eq!(collected, vec![&b"k003"[..], b"k001", b"k099"]);
        batch.clear();
        assert!(batch.is_empty());
    }

    #[test]
    fn decimal_helpers() {
        let mut out = Vec::new();
        push_decimal(&mut out, 0);
        push_decimal(&mut out, u64::MAX);
        assert_eq!(out, format!("0{}", u64::MAX).as_bytes());
        assert_eq!(decimal_digits(0), 1);
        assert_eq!(decimal_digits(9), 1);
        assert_eq!(decimal_digits(10), 2);
    }
}
