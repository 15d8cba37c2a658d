//! memcached's classic text protocol: `set` and `get` (one key or many).

use super::{
    is_memcache_error, line_end, parse_decimal, parse_store_line, skip_data, ParseResult, Reply,
};
use crate::workload::{push_decimal, KeyBatch};

/// `get k1 k2 ... kN\r\n`
pub fn encode_get(out: &mut Vec<u8>, keys: &KeyBatch) {
    out.extend_from_slice(b"get");
    for key in keys.iter() {
        out.push(b' ');
        out.extend_from_slice(key);
    }
    out.extend_from_slice(b"\r\n");
}

/// `set <key> 0 <ttl> <len>\r\n<value>\r\n`
pub fn encode_set(out: &mut Vec<u8>, key: &[u8], value: &[u8], ttl_secs: u32) {
    out.extend_from_slice(b"set ");
    out.extend_from_slice(key);
    out.extend_from_slice(b" 0 ");
    push_decimal(out, u64::from(ttl_secs));
    out.push(b' ');
    push_decimal(out, value.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n` per hit, then `END\r\n`.
pub fn parse_get(input: &[u8]) -> ParseResult {
    let mut pos = 0;
    let mut hits = 0u32;
    loop {
        let Some((line_stop, next)) = line_end(input, pos) else {
            return Ok(None);
        };
        let line = &input[pos..line_stop];
        if line == b"END" {
            return Ok(Some(Reply {
                consumed: next,
                hits,
                ..Reply::default()
            }));
        }
        if is_memcache_error(line) {
            return Ok(Some(Reply {
                consumed: next,
                hits,
                error: true,
                ..Reply::default()
            }));
        }
        let Some(header) = line.strip_prefix(b"VALUE ") else {
            return Err(format!(
                "unexpected get reply line {:?}",
                String::from_utf8_lossy(line)
            ));
        };
        let bytes = header
            .split(|&b| b == b' ')
            .nth(2)
            .and_then(parse_decimal)
            .ok_or_else(|| format!("bad VALUE line {:?}", String::from_utf8_lossy(line)))?;
        let Some(end) = skip_data(input, next, bytes, "value data not followed by CRLF")? else {
            return Ok(None);
        };
        hits += 1;
        pos = end;
    }
}

/// `STORED\r\n`, or `NOT_STORED`/`EXISTS`/`NOT_FOUND`, or an error line.
pub fn parse_set(input: &[u8]) -> ParseResult {
    parse_store_line(
        input,
        b"STORED",
        &[b"NOT_STORED", b"EXISTS", b"NOT_FOUND"],
        is_memcache_error,
        "set",
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{check_prefixes, hits, ERROR, NOTHING, STORED};
    use super::super::Protocol;
    use crate::workload::{KeyBatch, KeySpace, OpKind, SizeRange};

    const P: Protocol = Protocol::MemcacheText;

    #[test]
    fn encodes_requests() {
        let keys = KeySpace::new(100, SizeRange::fixed(3)).unwrap();
        let mut batch = KeyBatch::default();
        batch.push(&keys, 7);
        let mut out = Vec::new();
        P.encode_get(&mut out, &batch);
        assert_eq!(out, b"get k07\r\n");
        batch.push(&keys, 42);
        out.clear();
        P.encode_get(&mut out, &batch);
        assert_eq!(out, b"get k07 k42\r\n");
        out.clear();
        P.encode_set(&mut out, b"k07", b"hello", 30);
        assert_eq!(out, b"set k07 0 30 5\r\nhello\r\n");
    }

    #[test]
    fn parses_get_replies() {
        check_prefixes(P, OpKind::Get, 1, b"END\r\n", NOTHING);
        let two = b"VALUE a 0 3\r\nxyz\r\nVALUE b 5 2 99\r\n\r\n\r\nEND\r\n";
        check_prefixes(P, OpKind::Get, 3, two, hits(2));
        check_prefixes(P, OpKind::Get, 1, b"CLIENT_ERROR bad data chunk\r\n", ERROR);
    }

    #[test]
    fn rejects_garbage_and_excess_hits() {
        assert!(P.parse_reply(OpKind::Get, 1, b"HELLO\r\n").is_err());
        assert!(P.parse_reply(OpKind::Get, 1, b"VALUE a 0 x\r\n").is_err());
        assert!(P
            .parse_reply(OpKind::Get, 1, b"VALUE a 0 1\r\nxyEND\r\n")
            .is_err());
        let two = b"VALUE a 0 1\r\nx\r\nVALUE a 0 1\r\nx\r\nEND\r\n";
        assert!(
            P.parse_reply(OpKind::Get, 1, two).is_err(),
            "more hits than keys"
        );
    }

    #[test]
    fn parses_set_replies() {
        check_prefixes(P, OpKind::Set, 1, b"STORED\r\n", STORED);
        check_prefixes(P, OpKind::Set, 1, b"NOT_STORED\r\n", NOTHING);
        let oom = b"SERVER_ERROR out of memory storing object\r\n";
        check_prefixes(P, OpKind::Set, 1, oom, ERROR);
        assert!(P.parse_reply(OpKind::Set, 1, b"+OK\r\n").is_err());
    }
}
