//! TTL buckets: segments hold items of similar time-to-live so that expiry frees whole segments.
//!
//! As in Segcache, 1024 buckets in four tiers of 256, each tier eight times coarser:
//!
//! | tier | TTL range             | bucket width |
//! |------|-----------------------|--------------|
//! | 1    | 1 s – 2,047 s         | 8 s          |
//! | 2    | 2,048 s – 32,767 s    | 128 s        |
//! | 3    | 32,768 s – 524,287 s  | 2,048 s      |
//! | 4    | 524,288 s and longer  | 32,768 s     |
//!
//! Unlike Segcache, items keep their exact expiry in the record (lazy check on read) and a
//! segment expires at the latest expiry among its items, so no item expires early. Items that
//! never expire have their own bucket, [`NO_EXPIRY_BUCKET`].

/// Number of TTL buckets, including the no-expiry bucket.
pub const TTL_BUCKET_COUNT: usize = 1025;
/// The bucket of items without expiry.
pub const NO_EXPIRY_BUCKET: usize = 1024;

/// The bucket for an item that lives `ttl_ms` more milliseconds (`None`: never expires).
pub fn bucket_for(ttl_ms: Option<u64>) -> usize {
    let Some(ttl_ms) = ttl_ms else {
        return NO_EXPIRY_BUCKET;
    };
    let ttl_secs = ttl_ms / 1000;
    let bucket = if ttl_secs < 2048 {
        ttl_secs >> 3
    } else if ttl_secs < 32_768 {
        256 + (ttl_secs >> 7).min(255)
    } else if ttl_secs < 524_288 {
        512 + (ttl_secs >> 11).min(255)
    } else {
        768 + (ttl_secs >> 15).min(255)
    };
    bucket as usize
}

/// The TTL bucket a record of `bucket` goes to, given the buckets that have a segment taking
/// records now (`taking`) and how many may (`cap`): its own when it has one or there is room
/// for one more; at the cap, the one with the nearest longer TTL, else the longest. Records
/// keep their exact expiry, so any is correct; the choice only affects how soon a whole segment
/// expires. The rule of writes (`Shard::write_bucket`, open segments) and of the cleaner
/// (its cleaner segments).
pub fn bucket_within_cap(
    taking: impl Iterator<Item = usize> + Clone,
    bucket: usize,
    cap: usize,
) -> usize {
    if taking.clone().any(|b| b == bucket) || taking.clone().count() < cap {
        return bucket;
    }
    taking
        .clone()
        .filter(|&b| b >= bucket)
        .min()
        .or_else(|| taking.max())
        .unwrap_or(bucket)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_cap_a_record_goes_to_the_nearest_longer_ttl_else_the_longest() {
        let taking = [3usize, 10, 50];
        let within = |bucket, cap| bucket_within_cap(taking.iter().copied(), bucket, cap);
        assert_eq!(within(10, 3), 10, "its own");
        assert_eq!(within(7, 4), 7, "room for one more");
        assert_eq!(within(7, 3), 10, "the nearest longer");
        assert_eq!(within(60, 3), 50, "else the longest");
        assert_eq!(bucket_within_cap(std::iter::empty(), 9, 0), 9);
    }

    #[test]
    fn tiers_match_segcache_boundaries() {
        assert_eq!(bucket_for(None), NO_EXPIRY_BUCKET);
        assert_eq!(bucket_for(Some(0)), 0);
        assert_eq!(bucket_for(Some(7_999)), 0);
        assert_eq!(bucket_for(Some(8_000)), 1);
        assert_eq!(bucket_for(Some(2_047_000)), 255);
        assert_eq!(bucket_for(Some(2_048_000)), 256 + 16);
        assert_eq!(bucket_for(Some(524_288_000)), 768 + 16);
        assert_eq!(bucket_for(Some(u64::MAX)), 1023);
        let mut last = 0;
        for secs in (0..10_000_000u64).step_by(997) {
            let b = bucket_for(Some(secs * 1000));
            assert!(
                b >= last && b < NO_EXPIRY_BUCKET,
                "buckets are monotonic in TTL"
            );
            last = b;
        }
    }
}
