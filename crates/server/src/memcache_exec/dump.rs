//! The two ways memcached lists its items.
//!
//! `stats cachedump <class> <limit>` (what libmemcached's `memcdump` reads): for class 1 (the
//! only one strata has), `ITEM <key> [<value bytes> b; <expiry, Unix seconds, or 0> s]` per
//! item, up to `limit` items (0: no limit) and, as memcached's, at most 2 MiB of reply; any
//! other class is just `END`; memcached's errors for a missing, malformed or illegal argument.
//!
//! `lru_crawler metadump <all|hash|classes>`: one line per item, as memcached 1.6 writes them,
//! then `END`:
//!
//! ```text
//! key=<key, URI-encoded> exp=<-1 | Unix seconds> la=<0> cas=<n> fetch=<yes|no> cls=1 size=<bytes>\n
//! ```
//!
//! Keys are URI-encoded as memcached does (every byte but letters, digits and `-._~` as
//! `%XX`), so `memcached-tool dump` and other readers of the dump decode them. strata has one
//! class (1, as `stats slabs` says), and `size` is what the item costs in memory (MEMORY USAGE's
//! figure). Departure: strata keeps no access time, so `la` is 0. Both dumps leave out keys
//! holding a Redis hash, which memcached's commands read as absent.
//!
//! The dump walks the keyspace with the engine's scan cursor, a bounded number of keys per
//! call: past the output soft limit or that bound, it pauses (the request stays unconsumed at
//! the front of the input, as a multiget does) and resumes from its cursor once the client
//! has read what was written, so a dump of millions of items neither holds the worker nor
//! buffers the keyspace. Items written or deleted during the dump may or may not appear, as
//! with memcached's crawler.

use std::io::Write as _;

use strata_engine::Kind;
use strata_protocol::memcache::Tokens;

use crate::context::ServerContext;

/// Keys one call dumps before it lets the worker serve other connections.
pub(super) const KEYS_PER_CALL_MAX: usize = 4096;
/// Keys asked of each scan step.
const KEYS_PER_STEP: usize = 128;

/// Runs (or resumes, from `cursor`) a dump of class 1 (`class_one`; other classes are empty).
/// Returns whether it paused: `cursor` then says where it resumes.
pub(super) fn metadump(
    cursor: &mut Option<u64>,
    class_one: bool,
    ctx: &ServerContext,
    out: &mut Vec<u8>,
    stop_len: usize,
) -> bool {
    let mut next = cursor.take().unwrap_or(0);
    let mut dumped = 0usize;
    if !class_one {
        out.extend_from_slice(b"END\r\n");
        return false;
    }
    loop {
        let keys;
        (keys, next) = scan_keys(ctx, next);
        for key in &keys {
            write_line(ctx, key, out);
        }
        dumped += keys.len();
        if next == 0 {
            break;
        }
        if out.len() >= stop_len || dumped >= KEYS_PER_CALL_MAX {
            *cursor = Some(next);
            return true;
        }
    }
    out.extend_from_slice(b"END\r\n");
    false
}

/// The keys of one scan step from `cursor`, and the cursor to go on from (0: done).
fn scan_keys(ctx: &ServerContext, cursor: u64) -> (Vec<Vec<u8>>, u64) {
    let mut keys = Vec::with_capacity(KEYS_PER_STEP);
    let next = ctx
        .engine
        .scan_step(cursor, KEYS_PER_STEP, &mut |key| keys.push(key.to_vec()))
        .next;
    (keys, next)
}

/// Most bytes a `stats cachedump` reply holds (memcached's).
const CACHEDUMP_BYTES_MAX: usize = 2 << 20;
/// Slab class ids are below this (memcached's `MAX_NUMBER_OF_SLAB_CLASSES`).
const SLAB_CLASSES_MAX: u32 = 64;

/// Runs `stats cachedump` with the arguments after `cachedump`.
pub(super) fn cachedump(args: &mut Tokens<'_>, ctx: &ServerContext, out: &mut Vec<u8>) {
    let (Some(class), Some(limit)) = (args.next(), args.next()) else {
        out.extend_from_slice(b"CLIENT_ERROR bad command line\r\n");
        return;
    };
    let number = |token: &[u8]| std::str::from_utf8(token).ok()?.parse::<u32>().ok();
    let (Some(class), Some(limit)) = (number(class), number(limit)) else {
        out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
        return;
    };
    if class >= SLAB_CLASSES_MAX {
        out.extend_from_slice(b"CLIENT_ERROR Illegal slab id\r\n");
        return;
    }
    let limit = if limit == 0 {
        usize::MAX
    } else {
        limit as usize
    };
    let start = out.len();
    let mut listed = 0usize;
    let mut cursor = 0;
    let full = |out: &Vec<u8>, listed| listed >= limit || out.len() - start >= CACHEDUMP_BYTES_MAX;
    while class == 1 && !full(out, listed) {
        let keys;
        (keys, cursor) = scan_keys(ctx, cursor);
        for key in &keys {
            if full(out, listed) {
                break;
            }
            let line_start = out.len();
            ctx.engine.peek(key, |item| {
                if item.kind != Kind::String {
                    return;
                }
                let exp = item.expires_at_ms.map_or(0, |ms| ms / 1000);
                out.extend_from_slice(b"ITEM ");
                out.extend_from_slice(key);
                let _ = write!(out, " [{} b; {exp} s]\r\n", item.value.len());
            });
            if out.len() - start > CACHEDUMP_BYTES_MAX {
                out.truncate(line_start);
                break;
            }
            listed += usize::from(out.len() > line_start);
        }
        if cursor == 0 {
            break;
        }
    }
    out.extend_from_slice(b"END\r\n");
}

/// The item's line, or nothing when it went between the scan and the read.
fn write_line(ctx: &ServerContext, key: &[u8], out: &mut Vec<u8>) {
    // One look (and, for an item on flash, one read), its size from the item itself.
    ctx.engine.peek(key, |item| {
        if item.kind != Kind::String {
            return;
        }
        out.extend_from_slice(b"key=");
        uri_encode(key, out);
        let exp = item
            .expires_at_ms
            .map_or(-1, |ms| i64::try_from(ms / 1000).unwrap_or(i64::MAX));
        let fetch = if item.fetched { "yes" } else { "no" };
        // Writing to a Vec cannot fail.
        let _ = writeln!(
            out,
            " exp={exp} la=0 cas={} fetch={fetch} cls=1 size={}",
            item.cas,
            item.memory_bytes()
        );
    });
}

/// memcached's URI encoding of a key: letters, digits and `-._~` as they are, any other byte
/// as `%XX` (upper-case hex).
fn uri_encode(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in key {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte);
        } else {
            out.extend_from_slice(&[
                b'%',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 15)],
            ]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_uri_encoded_as_memcached_does() {
        let mut out = Vec::new();
        uri_encode(b"a:b/c~d", &mut out);
        assert_eq!(out, b"a%3Ab%2Fc~d");
        out.clear();
        uri_encode(b"b%20x\x01\xff-_.", &mut out);
        assert_eq!(out, b"b%2520x%01%FF-_.");
    }
}
