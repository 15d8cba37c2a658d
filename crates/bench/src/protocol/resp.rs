//! Redis RESP2: `SET`, `GET` and `MGET`.

use super::{line_end, parse_decimal, parse_store_line, skip_data, ParseResult, Reply};
use crate::workload::{decimal_digits, push_decimal, KeyBatch};

/// `GET <key>` for one key, `MGET <k1> ... <kN>` for a batch, as RESP arrays of bulk strings.
pub fn encode_get(out: &mut Vec<u8>, keys: &KeyBatch) {
    if keys.len() == 1 {
        out.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
    } else {
        array_header(out, keys.len() + 1);
        out.extend_from_slice(b"$4\r\nMGET\r\n");
    }
    for key in keys.iter() {
        bulk(out, key);
    }
}

/// `SET <key> <value> [EX <ttl>]`
pub fn encode_set(out: &mut Vec<u8>, key: &[u8], value: &[u8], ttl_secs: u32) {
    if ttl_secs == 0 {
        out.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
    } else {
        out.extend_from_slice(b"*5\r\n$3\r\nSET\r\n");
    }
    bulk(out, key);
    bulk(out, value);
    if ttl_secs > 0 {
        out.extend_from_slice(b"$2\r\nEX\r\n");
        // The TTL as a bulk string, its digits written in place.
        let ttl = u64::from(ttl_secs);
        out.push(b'$');
        push_decimal(out, decimal_digits(ttl) as u64);
        out.extend_from_slice(b"\r\n");
        push_decimal(out, ttl);
        out.extend_from_slice(b"\r\n");
    }
}

/// A bulk string (hit), a null bulk string (miss), an error; for a batch, an array of them.
pub fn parse_get(input: &[u8], keys: usize) -> ParseResult {
    if keys == 1 {
        return Ok(bulk_reply(input, 0)?.map(|(consumed, hits, error)| Reply {
            consumed,
            hits,
            error,
            ..Reply::default()
        }));
    }
    let Some((line_stop, next)) = line_end(input, 0) else {
        return Ok(None);
    };
    let line = &input[..line_stop];
    if is_resp_error(line) {
        return Ok(Some(Reply {
            consumed: next,
            error: true,
            ..Reply::default()
        }));
    }
    let count = line
        .strip_prefix(b"*")
        .and_then(parse_decimal)
        .ok_or_else(|| format!("unexpected MGET reply {:?}", String::from_utf8_lossy(line)))?;
    if count != keys {
        return Err(format!(
            "MGET of {keys} keys answered with {count} elements"
        ));
    }
    let mut pos = next;
    let mut hits = 0;
    for _ in 0..count {
        let Some((end, hit, _)) = bulk_reply(input, pos)? else {
            return Ok(None);
        };
        hits += hit;
        pos = end;
    }
    Ok(Some(Reply {
        consumed: pos,
        hits,
        ..Reply::default()
    }))
}

/// `+OK` when stored, a null bulk string when a condition failed, or an error.
pub fn parse_set(input: &[u8]) -> ParseResult {
    parse_store_line(input, b"+OK", &[b"$-1"], is_resp_error, "SET")
}

/// True for RESP error lines (`-ERR ...`, `-OOM ...`).
fn is_resp_error(line: &[u8]) -> bool {
    line.first() == Some(&b'-')
}

/// One bulk string at `pos`: `(end, hits, error)`, hits being 1 for data and 0 for null.
fn bulk_reply(input: &[u8], pos: usize) -> Result<Option<(usize, u32, bool)>, String> {
    let Some((line_stop, next)) = line_end(input, pos) else {
        return Ok(None);
    };
    let line = &input[pos..line_stop];
    match line.first() {
        Some(b'-') => return Ok(Some((next, 0, true))),
        _ if line == b"$-1" => return Ok(Some((next, 0, false))),
        _ => {}
    }
    let len = line
        .strip_prefix(b"$")
        .and_then(parse_decimal)
        .ok_or_else(|| format!("unexpected GET reply {:?}", String::from_utf8_lossy(line)))?;
    let Some(end) = skip_data(input, next, len, "bulk string not followed by CRLF")? else {
        return Ok(None);
    };
    Ok(Some((end, 1, false)))
}

fn array_header(out: &mut Vec<u8>, count: usize) {
    out.push(b'*');
    push_decimal(out, count as u64);
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.push(b'$');
    push_decimal(out, data.len() as u64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{check_prefixes, hits, ERROR, NOTHING, STORED};
    use super::super::Protocol;
    use crate::workload::{KeyBatch, KeySpace, OpKind, SizeRange};

    const P: Protocol = Protocol::Resp;

    #[test]
    fn encodes_requests() {
        let keys = KeySpace::new(100, SizeRange::fixed(3)).unwrap();
        let mut batch = KeyBatch::default();
        batch.push(&keys, 5);
        let mut out = Vec::new();
        P.encode_get(&mut out, &batch);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$3\r\nk05\r\n");
        batch.push(&keys, 6);
        out.clear();
        P.encode_get(&mut out, &batch);
        assert_eq!(out, b"*3\r\n$4\r\nMGET\r\n$3\r\nk05\r\n$3\r\nk06\r\n");
        out.clear();
        P.encode_set(&mut out, b"k05", b"v", 0);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$3\r\nk05\r\n$1\r\nv\r\n");
        out.clear();
        P.encode_set(&mut out, b"k05", b"v", 100);
        assert_eq!(
            out,
            b"*5\r\n$3\r\nSET\r\n$3\r\nk05\r\n$1\r\nv\r\n$2\r\nEX\r\n$3\r\n100\r\n"
        );
    }

    #[test]
    fn encodes_ttls_of_every_width() {
        for ttl in [1, 9, 10, 99, 100, 65_536, u32::MAX] {
            let mut out = Vec::new();
            P.encode_set(&mut out, b"k", b"v", ttl);
            let digits = ttl.to_string();
            let want = format!(
                "*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nEX\r\n${}\r\n{digits}\r\n",
                digits.len()
            );
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }

    #[test]
    fn parses_get_and_mget() {
        check_prefixes(P, OpKind::Get, 1, b"$-1\r\n", NOTHING);
        check_prefixes(P, OpKind::Get, 1, b"$5\r\nhello\r\n", hits(1));
        let mget = b"*3\r\n$1\r\na\r\n$-1\r\n$0\r\n\r\n";
        check_prefixes(P, OpKind::Get, 3, mget, hits(2));
        let error = b"-ERR wrong number of arguments\r\n";
        check_prefixes(P, OpKind::Get, 1, error, ERROR);
        assert!(P.parse_reply(OpKind::Get, 2, b"*3\r\n").is_err());
        assert!(P.parse_reply(OpKind::Get, 1, b":1\r\n").is_err());
    }

    #[test]
    fn parses_set_replies() {
        check_prefixes(P, OpKind::Set, 1, b"+OK\r\n", STORED);
        let oom = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n";
        check_prefixes(P, OpKind::Set, 1, oom, ERROR);
        assert!(P.parse_reply(OpKind::Set, 1, b"STORED\r\n").is_err());
    }
}
