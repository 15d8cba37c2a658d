//! Encoding requests, the client side: used by the property tests to check that parsing
//! inverts encoding, and by load generators.
//!
//! The encoding is canonical: single spaces, `\r\n` line ends, `noreply` only when set, the
//! legacy `delete <key> 0` hold time never written. Parsing the output yields an equal request.

use super::encode::{write_i64, write_u64};
use super::{LruCrawler, MetaFlags, Request, ShutdownMode, Tokens};

/// Appends `request` as a client would send it; returns the bytes written.
///
/// [`Request::TooLarge`] has no data to send and writes nothing.
pub fn encode_request(out: &mut Vec<u8>, request: &Request<'_>) -> usize {
    let start = out.len();
    match request {
        Request::Get(get) => {
            out.extend_from_slice(get.command.name());
            if let Some(exptime) = get.exptime {
                out.push(b' ');
                write_i64(out, exptime);
            }
            write_tokens(out, get.keys.iter());
            finish_line(out, false);
        }
        Request::Store(store) => {
            write_words(out, &[store.command.name(), store.key]);
            out.push(b' ');
            write_u64(out, u64::from(store.flags));
            out.push(b' ');
            write_i64(out, store.exptime);
            out.push(b' ');
            write_u64(out, store.data.len() as u64);
            if let Some(cas) = store.cas_unique {
                out.push(b' ');
                write_u64(out, cas);
            }
            finish_line(out, store.noreply);
            out.extend_from_slice(store.data);
            finish_line(out, false);
        }
        Request::TooLarge(_) => {}
        Request::Delete(delete) => {
            write_words(out, &[b"delete", delete.key]);
            finish_line(out, delete.noreply);
        }
        Request::Arith(arith) => {
            write_words(out, &[arith.command.name(), arith.key]);
            out.push(b' ');
            write_u64(out, arith.delta);
            finish_line(out, arith.noreply);
        }
        Request::Touch(touch) => {
            write_words(out, &[b"touch", touch.key]);
            out.push(b' ');
            write_i64(out, touch.exptime);
            finish_line(out, touch.noreply);
        }
        _ => encode_admin_or_meta(out, request),
    }
    out.len() - start
}

fn encode_admin_or_meta(out: &mut Vec<u8>, request: &Request<'_>) {
    match request {
        Request::FlushAll(flush) => {
            out.extend_from_slice(b"flush_all");
            if let Some(delay) = flush.delay {
                out.push(b' ');
                write_i64(out, delay);
            }
            finish_line(out, flush.noreply);
        }
        Request::Verbosity(verbosity) => {
            out.extend_from_slice(b"verbosity ");
            write_u64(out, u64::from(verbosity.level));
            finish_line(out, verbosity.noreply);
        }
        Request::CacheMemlimit(limit) => {
            out.extend_from_slice(b"cache_memlimit ");
            write_u64(out, u64::from(limit.megabytes));
            finish_line(out, limit.noreply);
        }
        Request::LruCrawler(LruCrawler::Metadump { class_one }) => {
            // Class 2 holds nothing on strata: a dump of no class it uses.
            out.extend_from_slice(if *class_one {
                b"lru_crawler metadump all\r\n"
            } else {
                b"lru_crawler metadump 2\r\n"
            });
        }
        Request::Version => out.extend_from_slice(b"version\r\n"),
        Request::Quit => out.extend_from_slice(b"quit\r\n"),
        Request::Stats(stats) => {
            out.extend_from_slice(b"stats");
            write_tokens(out, stats.args);
            finish_line(out, false);
        }
        Request::Shutdown(mode) => out.extend_from_slice(match mode {
            ShutdownMode::Immediate => &b"shutdown\r\n"[..],
            ShutdownMode::Graceful => b"shutdown graceful\r\n",
            ShutdownMode::Invalid => b"shutdown invalid\r\n",
        }),
        Request::MetaGet(get) => write_meta(out, b"mg", get.key, None, &get.flags),
        Request::MetaSet(set) => {
            write_meta(out, b"ms", set.key, Some(set.data.len()), &set.flags);
            out.extend_from_slice(set.data);
            finish_line(out, false);
        }
        Request::MetaDelete(delete) => write_meta(out, b"md", delete.key, None, &delete.flags),
        Request::MetaArith(arith) => write_meta(out, b"ma", arith.key, None, &arith.flags),
        Request::MetaNoop => out.extend_from_slice(b"mn\r\n"),
        Request::MetaDebug(debug) => {
            write_words(out, &[b"me", debug.key]);
            out.extend_from_slice(if debug.key_base64 {
                &b" b\r\n"[..]
            } else {
                b"\r\n"
            });
        }
        Request::Get(_)
        | Request::Store(_)
        | Request::TooLarge(_)
        | Request::Delete(_)
        | Request::Arith(_)
        | Request::Touch(_) => unreachable!("encoded by encode_request"),
    }
}

fn write_words(out: &mut Vec<u8>, words: &[&[u8]]) {
    for (index, word) in words.iter().enumerate() {
        if index > 0 {
            out.push(b' ');
        }
        out.extend_from_slice(word);
    }
}

fn write_tokens(out: &mut Vec<u8>, tokens: Tokens<'_>) {
    for token in tokens {
        out.push(b' ');
        out.extend_from_slice(token);
    }
}

fn finish_line(out: &mut Vec<u8>, noreply: bool) {
    if noreply {
        out.extend_from_slice(b" noreply");
    }
    out.extend_from_slice(b"\r\n");
}

fn write_meta(
    out: &mut Vec<u8>,
    command: &[u8],
    key: &[u8],
    data_len: Option<usize>,
    flags: &MetaFlags<'_>,
) {
    write_words(out, &[command, key]);
    if let Some(data_len) = data_len {
        out.push(b' ');
        write_u64(out, data_len as u64);
    }
    write_tokens(out, flags.tokens());
    finish_line(out, false);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memcache::{parse, Limits};

    #[test]
    fn canonical_forms_round_trip() {
        let inputs: &[&[u8]] = &[
            b"get a b\r\n",
            b"gats -5 a\r\n",
            b"set k 1 -1 3\r\nabc\r\n",
            b"cas k 1 0 1 77 noreply\r\nx\r\n",
            b"delete k noreply\r\n",
            b"incr k 5\r\n",
            b"touch k 10 noreply\r\n",
            b"flush_all 5 noreply\r\n",
            b"flush_all\r\n",
            b"verbosity 3\r\n",
            b"version\r\n",
            b"quit\r\n",
            b"stats detail on\r\n",
            b"shutdown graceful\r\n",
            b"shutdown invalid\r\n",
            b"mg k v c O12\r\n",
            b"ms k 2 T5 MA\r\nhi\r\n",
            b"md k q\r\n",
            b"ma k MD D3\r\n",
            b"mn\r\n",
            b"me YQ== b\r\n",
        ];
        for &input in inputs {
            let parsed = parse(input, &Limits::default()).unwrap();
            assert_eq!(parsed.consumed, input.len());
            let mut out = Vec::new();
            assert_eq!(encode_request(&mut out, &parsed.request), input.len());
            assert_eq!(out, input, "{:?}", String::from_utf8_lossy(input));
        }
    }

    #[test]
    fn legacy_delete_hold_is_dropped() {
        let parsed = parse(b"delete k 0\r\n", &Limits::default()).unwrap();
        let mut out = Vec::new();
        encode_request(&mut out, &parsed.request);
        assert_eq!(out, b"delete k\r\n");
    }
}
