//! memcached's meta protocol: `ms` and `mg ... v`.
//!
//! A one-key read is `mg <key> v` (reply `VA <len>` + data, or `EN`). A batch is one quiet
//! `mg <key> v q` per key followed by `mn`: misses stay silent, hits answer `VA`, and `MN`
//! closes the batch, which is how meta clients pipeline multi-gets.

use super::{
    is_memcache_error, line_end, parse_decimal, parse_store_line, skip_data, ParseResult, Reply,
};
use crate::workload::{push_decimal, KeyBatch};

/// `mg <key> v\r\n`, or `mg <key> v q\r\n` per key and `mn\r\n` for a batch.
pub fn encode_get(out: &mut Vec<u8>, keys: &KeyBatch) {
    let quiet = keys.len() > 1;
    for key in keys.iter() {
        out.extend_from_slice(b"mg ");
        out.extend_from_slice(key);
        out.extend_from_slice(if quiet { b" v q\r\n" } else { b" v\r\n" });
    }
    if quiet {
        out.extend_from_slice(b"mn\r\n");
    }
}

/// `ms <key> <len> [T<ttl>]\r\n<value>\r\n`
pub fn encode_set(out: &mut Vec<u8>, key: &[u8], value: &[u8], ttl_secs: u32) {
    out.extend_from_slice(b"ms ");
    out.extend_from_slice(key);
    out.push(b' ');
    push_decimal(out, value.len() as u64);
    if ttl_secs > 0 {
        out.extend_from_slice(b" T");
        push_decimal(out, u64::from(ttl_secs));
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// One `VA`/`EN` for a single key; `VA`s (and errors) up to `MN` for a batch.
pub fn parse_get(input: &[u8], keys: usize) -> ParseResult {
    let batch = keys > 1;
    let mut pos = 0;
    let mut hits = 0u32;
    let mut error = false;
    loop {
        let Some((line_stop, next)) = line_end(input, pos) else {
            return Ok(None);
        };
        let line = &input[pos..line_stop];
        if let Some(header) = line.strip_prefix(b"VA ") {
            let len = header
                .split(|&b| b == b' ')
                .next()
                .and_then(parse_decimal)
                .ok_or_else(|| format!("bad VA line {:?}", String::from_utf8_lossy(line)))?;
            let Some(end) = skip_data(input, next, len, "value data not followed by CRLF")? else {
                return Ok(None);
            };
            hits += 1;
            pos = end;
        } else if is_memcache_error(line) {
            error = true;
            pos = next;
        } else if !((line == b"EN" && !batch) || (line == b"MN" && batch)) {
            return Err(format!(
                "unexpected mg reply line {:?}",
                String::from_utf8_lossy(line)
            ));
        } else {
            pos = next;
        }
        if !batch || line == b"MN" {
            return Ok(Some(Reply {
                consumed: pos,
                hits,
                error,
                ..Reply::default()
            }));
        }
    }
}

/// `HD\r\n` when stored, `NS` when not, or an error line.
pub fn parse_set(input: &[u8]) -> ParseResult {
    parse_store_line(
        input,
        b"HD",
        &[b"NS", b"EX", b"NF"],
        is_memcache_error,
        "ms",
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{check_prefixes, hits, ERROR, NOTHING, STORED};
    use super::super::Protocol;
    use crate::workload::{KeyBatch, KeySpace, OpKind, SizeRange};

    const P: Protocol = Protocol::MemcacheMeta;

    #[test]
    fn encodes_requests() {
        let keys = KeySpace::new(100, SizeRange::fixed(3)).unwrap();
        let mut batch = KeyBatch::default();
        batch.push(&keys, 1);
        let mut out = Vec::new();
        P.encode_get(&mut out, &batch);
        assert_eq!(out, b"mg k01 v\r\n");
        batch.push(&keys, 2);
        out.clear();
        P.encode_get(&mut out, &batch);
        assert_eq!(out, b"mg k01 v q\r\nmg k02 v q\r\nmn\r\n");
        out.clear();
        P.encode_set(&mut out, b"k01", b"abc", 0);
        assert_eq!(out, b"ms k01 3\r\nabc\r\n");
        out.clear();
        P.encode_set(&mut out, b"k01", b"abc", 60);
        assert_eq!(out, b"ms k01 3 T60\r\nabc\r\n");
    }

    #[test]
    fn parses_single_gets() {
        check_prefixes(P, OpKind::Get, 1, b"EN\r\n", NOTHING);
        check_prefixes(P, OpKind::Get, 1, b"VA 3 f0\r\nabc\r\n", hits(1));
        assert!(P.parse_reply(OpKind::Get, 1, b"MN\r\n").is_err());
    }

    #[test]
    fn parses_batches() {
        let batch = b"VA 1\r\nx\r\nVA 2\r\nyz\r\nMN\r\n";
        check_prefixes(P, OpKind::Get, 5, batch, hits(2));
        let with_error = b"CLIENT_ERROR bad command line format\r\nMN\r\n";
        check_prefixes(P, OpKind::Get, 2, with_error, ERROR);
        assert!(P.parse_reply(OpKind::Get, 2, b"EN\r\n").is_err());
    }

    #[test]
    fn parses_set_replies() {
        check_prefixes(P, OpKind::Set, 1, b"HD\r\n", STORED);
        check_prefixes(P, OpKind::Set, 1, b"NS\r\n", NOTHING);
        assert!(P.parse_reply(OpKind::Set, 1, b"STORED\r\n").is_err());
    }
}
