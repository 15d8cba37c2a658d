//! Turning the workload into encoded requests: which verb, which keys, which value.

use std::ops::Range;
use std::sync::Arc;

use rand::rngs::SmallRng;

use crate::protocol::Protocol;
use crate::workload::{KeyBatch, OpKind, Workload};

/// Where a thread's keys come from.
#[derive(Debug, Clone)]
pub enum KeySource {
    /// Draw verbs from the mix and keys from the popularity distribution, without end.
    Random,
    /// Visit every key of a range once, in order, with one verb (preload and read-back).
    Sequential {
        /// The verb for every request.
        op: OpKind,
        /// Positions not yet visited; position `p` is key `p * stride`.
        keys: Range<u64>,
        /// 1 visits every key; N visits every N-th (a sampled read-back).
        stride: u64,
    },
}

/// What one encoded request was, kept until its reply arrives.
#[derive(Debug, Clone, Copy)]
pub struct Encoded {
    /// Its verb.
    pub op: OpKind,
    /// Keys it names (1 for a SET).
    pub keys: u32,
}

/// Encodes requests for one thread.
#[derive(Debug)]
pub struct RequestMaker {
    protocol: Protocol,
    workload: Arc<Workload>,
    source: KeySource,
    rng: SmallRng,
    batch: KeyBatch,
}

impl RequestMaker {
    /// A maker drawing from `source`, with its own random stream.
    #[must_use]
    pub fn new(protocol: Protocol, workload: Arc<Workload>, source: KeySource, seed: u64) -> Self {
        let rng = <SmallRng as rand::SeedableRng>::seed_from_u64(seed);
        RequestMaker {
            protocol,
            workload,
            source,
            rng,
            batch: KeyBatch::default(),
        }
    }

    /// True when a sequential source has visited all its keys.
    #[must_use]
    pub fn is_exhausted(&self) -> bool {
        matches!(&self.source, KeySource::Sequential { keys, .. } if keys.is_empty())
    }

    /// Appends the next request to `out`, or returns `None` when the source is exhausted.
    pub fn encode_next(&mut self, out: &mut Vec<u8>) -> Option<Encoded> {
        let Self {
            protocol,
            workload,
            source,
            rng,
            batch,
        } = self;
        batch.clear();
        let op = match source {
            KeySource::Random => {
                let op = workload.next_op(rng);
                for _ in 0..workload.keys_per(op) {
                    let index = workload.sample_key(rng);
                    batch.push(&workload.keys, index);
                }
                op
            }
            KeySource::Sequential { op, keys, stride } => {
                for position in keys.by_ref().take(workload.keys_per(*op)) {
                    batch.push(&workload.keys, position * *stride);
                }
                if batch.is_empty() {
                    return None;
                }
                *op
            }
        };
        match op {
            OpKind::Get => protocol.encode_get(out, batch),
            OpKind::Set => {
                let value = workload.value(rng);
                let key = batch.iter().next().expect("a SET names one key");
                protocol.encode_set(out, key, value, workload.ttl_secs);
            }
        }
        // batch_keys <= BATCH_KEYS_MAX, so the count fits.
        let keys = u32::try_from(batch.len()).expect("batch within BATCH_KEYS_MAX");
        Some(Encoded { op, keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{KeyDist, SizeRange, WorkloadSpec};

    fn workload(batch_keys: usize) -> Arc<Workload> {
        let spec = WorkloadSpec {
            keys_count: 10,
            key_dist: KeyDist::Uniform,
            key_size: SizeRange::fixed(4),
            value_size: SizeRange::fixed(2),
            ratio: "1:1".parse().unwrap(),
            batch_keys,
            ttl_secs: 0,
            seed: 0,
        };
        Arc::new(Workload::new(&spec).unwrap())
    }

    #[test]
    fn sequential_sets_visit_each_key_once() {
        let source = KeySource::Sequential {
            op: OpKind::Set,
            keys: 3..6,
            stride: 1,
        };
        let mut maker = RequestMaker::new(Protocol::MemcacheText, workload(1), source, 1);
        let mut out = Vec::new();
        while maker.encode_next(&mut out).is_some() {}
        assert!(maker.is_exhausted());
        let text = String::from_utf8(out).unwrap();
        let keys: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("set "))
            .collect();
        let keys: Vec<&str> = keys.iter().map(|l| &l[..4]).collect();
        assert_eq!(keys, ["k003", "k004", "k005"]);
    }

    #[test]
    fn sequential_gets_batch_the_remaining_keys() {
        let source = KeySource::Sequential {
            op: OpKind::Get,
            keys: 0..5,
            stride: 1,
        };
        let mut maker = RequestMaker::new(Protocol::MemcacheText, workload(3), source, 1);
        let mut out = Vec::new();
        assert_eq!(maker.encode_next(&mut out).unwrap().keys, 3);
        assert_eq!(maker.encode_next(&mut out).unwrap().keys, 2);
        assert!(maker.encode_next(&mut out).is_none());
        assert_eq!(out, b"get k000 k001 k002\r\nget k003 k004\r\n");
    }

    #[test]
    fn strided_gets_visit_every_nth_key() {
        let source = KeySource::Sequential {
            op: OpKind::Get,
            keys: 0..4,
            stride: 3,
        };
        let mut maker = RequestMaker::new(Protocol::MemcacheText, workload(2), source, 1);
        let mut out = Vec::new();
        while maker.encode_next(&mut out).is_some() {}
        assert_eq!(out, b"get k000 k003\r\nget k006 k009\r\n");
    }

    #[test]
    fn random_requests_follow_the_mix() {
        let mut maker = RequestMaker::new(Protocol::Resp, workload(4), KeySource::Random, 2);
        let mut out = Vec::new();
        let mut gets = 0;
        for _ in 0..1000 {
            let encoded = maker.encode_next(&mut out).unwrap();
            match encoded.op {
                OpKind::Get => {
                    gets += 1;
                    assert_eq!(encoded.keys, 4);
                }
                OpKind::Set => assert_eq!(encoded.keys, 1),
            }
        }
        assert!((400..600).contains(&gets), "{gets}");
        assert!(!maker.is_exhausted());
    }
}
