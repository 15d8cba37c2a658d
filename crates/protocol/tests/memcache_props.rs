//! Property tests of the memcached text + meta parser.
//!
//! Invariants checked:
//! - Any input, random bytes or a soup of protocol words: `parse` never panics, never reports
//!   more bytes consumed than it was given, and consumes at least one byte unless incomplete.
//! - Every key of a parsed request is non-empty, within `key_len_max`, and free of whitespace
//!   and control characters.
//! - For generated valid requests in canonical form, `encode_request(parse(x)) == x`, and
//!   parsing again gives an equal request.
//! - A pipelined stream of valid requests split at any byte boundaries parses, chunk by chunk,
//!   into `Incomplete`s and exactly the requests the whole stream gives.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use proptest::prelude::*;
use strata_protocol::memcache::{
    encode_base64, encode_request, key_is_valid, parse, Limits, ParseError, Parsed, Request,
};

fn limits() -> Limits {
    Limits {
        value_len_max: 4096,
        ..Limits::default()
    }
}

/// Every key a request carries.
fn keys<'a>(request: &Request<'a>) -> Vec<&'a [u8]> {
    match request {
        Request::Get(get) => get.keys.iter().collect(),
        Request::Store(store) => vec![store.key],
        Request::TooLarge(too_large) => vec![too_large.key],
        Request::Delete(delete) => vec![delete.key],
        Request::Arith(arith) => vec![arith.key],
        Request::Touch(touch) => vec![touch.key],
        Request::MetaGet(get) => vec![get.key],
        Request::MetaSet(set) => vec![set.key],
        Request::MetaDelete(delete) => vec![delete.key],
        Request::MetaArith(arith) => vec![arith.key],
        Request::MetaDebug(debug) => vec![debug.key],
        _ => vec![],
    }
}

/// Parses `buf` once and checks the invariants that hold for any input.
fn check_any(buf: &[u8]) {
    let limits = limits();
    match parse(buf, &limits) {
        Ok(Parsed { request, consumed }) => {
            assert!(consumed > 0 && consumed <= buf.len());
            for key in keys(&request) {
                assert!(key_is_valid(key, limits.key_len_max), "bad key {key:?}");
                assert!(!key
                    .iter()
                    .any(|b| b.is_ascii_whitespace() || b.is_ascii_control()));
            }
        }
        Err(ParseError::Reply {
            consumed, reply, ..
        }) => {
            assert!(consumed > 0 && consumed <= buf.len());
            assert!(reply.is_empty() || reply.ends_with(b"\r\n"));
        }
        Err(_) => {}
    }
}

fn word_soup() -> impl Strategy<Value = Vec<u8>> {
    let words = prop::sample::select(vec![
        "get",
        "gets",
        "gat",
        "gats",
        "set",
        "add",
        "replace",
        "append",
        "prepend",
        "cas",
        "delete",
        "incr",
        "decr",
        "touch",
        "flush_all",
        "version",
        "verbosity",
        "quit",
        "stats",
        "shutdown",
        "mg",
        "ms",
        "md",
        "ma",
        "mn",
        "me",
        "noreply",
        "0",
        "1",
        "-1",
        "5",
        "a",
        "k",
        "YQ==",
        "b",
        "v",
        "q",
        "T30",
        "O12",
        "MA",
        "ME",
        "MX",
        "D5",
        "F7",
        "C1",
        "N0",
        "\r\n",
        "\n",
        "\r",
        " ",
        "  ",
        "xy",
        "\t",
        "\x01",
        "18446744073709551616",
        "4294967296",
    ]);
    prop::collection::vec(words, 0..40).prop_map(|words| words.concat().into_bytes())
}

fn key() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![8 => 0x21u8..0x7f, 1 => 0x80u8..=0xff];
    prop_oneof![
        8 => prop::collection::vec(byte.clone(), 1..12),
        1 => prop::collection::vec(byte, 240..=250),
    ]
}

fn data() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..64)
}

fn noreply() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just(""), Just(" noreply")]
}

/// A valid classic request in canonical form.
fn classic_request() -> impl Strategy<Value = Vec<u8>> {
    let store_name = prop::sample::select(vec!["set", "add", "replace", "append", "prepend"]);
    let get_name = prop::sample::select(vec!["get", "gets"]);
    let gat_name = prop::sample::select(vec!["gat", "gats"]);
    prop_oneof![
        (get_name, prop::collection::vec(key(), 1..20)).prop_map(|(name, keys)| {
            let mut line = name.as_bytes().to_vec();
            for key in keys {
                line.push(b' ');
                line.extend_from_slice(&key);
            }
            line.extend_from_slice(b"\r\n");
            line
        }),
        (gat_name, any::<i64>(), prop::collection::vec(key(), 0..5)).prop_map(
            |(name, exptime, keys)| {
                let mut line = format!("{name} {exptime}").into_bytes();
                for key in keys {
                    line.push(b' ');
                    line.extend_from_slice(&key);
                }
                line.extend_from_slice(b"\r\n");
                line
            }
        ),
        (
            store_name,
            key(),
            any::<u32>(),
            any::<i64>(),
            data(),
            noreply()
        )
            .prop_map(|(name, key, flags, exptime, data, noreply)| {
                let head = format!(" {flags} {exptime} {}{noreply}\r\n", data.len());
                [name.as_bytes(), b" ", &key, head.as_bytes(), &data, b"\r\n"].concat()
            }),
        (
            key(),
            any::<u32>(),
            any::<i64>(),
            data(),
            any::<u64>(),
            noreply()
        )
            .prop_map(|(key, flags, exptime, data, cas, noreply)| {
                let head = format!(" {flags} {exptime} {} {cas}{noreply}\r\n", data.len());
                [b"cas ", &key[..], head.as_bytes(), &data, b"\r\n"].concat()
            }),
        (
            prop::sample::select(vec!["delete", "incr", "decr", "touch"]),
            key(),
            any::<u64>(),
            noreply()
        )
            .prop_map(|(name, key, number, noreply)| {
                let tail = match name {
                    "delete" => format!("{noreply}\r\n"),
                    "touch" => format!(" {}{noreply}\r\n", number as i64),
                    _ => format!(" {number}{noreply}\r\n"),
                };
                [name.as_bytes(), b" ", &key, tail.as_bytes()].concat()
            }),
        prop::sample::select(vec![
            "flush_all\r\n",
            "flush_all 10 noreply\r\n",
            "version\r\n",
            "verbosity 1\r\n",
            "quit\r\n",
            "stats\r\n",
            "stats items\r\n",
            "shutdown graceful\r\n",
            "mn\r\n",
        ])
        .prop_map(|line| line.as_bytes().to_vec()),
    ]
}

/// Flag tokens for a meta command: distinct letters, valid arguments, within the count limit.
fn meta_flags(mode_letters: &'static [&'static str]) -> impl Strategy<Value = Vec<String>> {
    let plain = prop::sample::subsequence(
        vec![
            "c", "f", "h", "k", "l", "q", "s", "t", "u", "v", "I", "P", "L",
        ],
        0..6,
    );
    let numbers = prop::collection::vec(
        (
            prop::sample::select(vec!['T', 'N', 'R', 'C', 'E', 'D', 'J', 'F']),
            any::<u32>(),
        ),
        0..5,
    );
    let opaque = prop::option::of("[a-zA-Z0-9]{0,31}");
    let mode = prop::option::of(prop::sample::select(mode_letters.to_vec()));
    (plain, numbers, opaque, mode).prop_map(|(plain, numbers, opaque, mode)| {
        let mut tokens: Vec<String> = plain.into_iter().map(String::from).collect();
        let mut seen = String::new();
        for (letter, value) in numbers {
            if !seen.contains(letter) {
                seen.push(letter);
                tokens.push(format!("{letter}{value}"));
            }
        }
        tokens.extend(opaque.map(|opaque| format!("O{opaque}")));
        tokens.extend(mode.map(|mode| format!("M{mode}")));
        tokens
    })
}

/// A valid meta request in canonical form; keys are sometimes base64 with `b`.
fn meta_request() -> impl Strategy<Value = Vec<u8>> {
    let key = prop_oneof![
        3 => key().prop_map(|key| (key, false)),
        1 => prop::collection::vec(any::<u8>(), 1..100).prop_map(|binary| {
            let mut key = Vec::new();
            encode_base64(&mut key, &binary);
            (key, true)
        }),
    ];
    let command = prop::sample::select(vec!["mg", "ms", "md", "ma"]);
    (
        command,
        key,
        meta_flags(&["S", "E", "A", "P", "R"]),
        meta_flags(&["I", "+", "D", "-"]),
        data(),
    )
        .prop_map(|(command, (key, base64), set_flags, arith_flags, data)| {
            let mut flags = if command == "ma" {
                arith_flags
            } else {
                set_flags
            };
            if command == "mg" {
                // strata's `mg` refuses `l` (no access time is kept).
                flags.retain(|flag| flag != "l");
            }
            if base64 {
                flags.push("b".to_string());
            }
            let mut line = [command.as_bytes(), b" ", &key].concat();
            if command == "ms" {
                line.extend_from_slice(format!(" {}", data.len()).as_bytes());
            }
            for flag in flags {
                line.push(b' ');
                line.extend_from_slice(flag.as_bytes());
            }
            line.extend_from_slice(b"\r\n");
            if command == "ms" {
                line.extend_from_slice(&data);
                line.extend_from_slice(b"\r\n");
            }
            line
        })
}

fn valid_request() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![classic_request(), meta_request()]
}

/// Parses a whole stream of valid requests into their canonical encodings.
fn parse_all(stream: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut rest = stream;
    loop {
        match parse(rest, &limits()) {
            Ok(parsed) => {
                let mut encoded = Vec::new();
                encode_request(&mut encoded, &parsed.request);
                out.push(encoded);
                rest = &rest[parsed.consumed..];
            }
            Err(ParseError::Incomplete) if rest.is_empty() => return out,
            other => panic!(
                "valid stream failed: {other:?} at {:?}",
                String::from_utf8_lossy(rest)
            ),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..512)) {
        check_any(&buf);
    }

    #[test]
    fn word_soup_never_panics(buf in word_soup()) {
        check_any(&buf);
        for end in 0..buf.len() {
            check_any(&buf[..end]);
        }
    }

    #[test]
    fn valid_requests_round_trip(request in valid_request()) {
        let parsed = parse(&request, &limits()).unwrap();
        prop_assert_eq!(parsed.consumed, request.len());
        let mut encoded = Vec::new();
        let written = encode_request(&mut encoded, &parsed.request);
        prop_assert_eq!(written, encoded.len());
        prop_assert_eq!(&encoded, &request);
        let again = parse(&encoded, &limits()).unwrap();
        prop_assert_eq!(again, parsed);
        for key in keys(&parsed.request) {
            prop_assert!(key_is_valid(key, limits().key_len_max));
        }
    }

    #[test]
    fn split_streams_parse_the_same(
        requests in prop::collection::vec(valid_request(), 1..8),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let stream = requests.concat();
        prop_assert_eq!(parse_all(&stream), requests.clone());
        let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut.index(stream.len() + 1)).collect();
        cuts.push(stream.len());
        cuts.sort_unstable();
        let mut parsed = Vec::new();
        let mut start = 0;
        for end in cuts {
            loop {
                match parse(&stream[start..end], &limits()) {
                    Ok(request) => {
                        let mut encoded = Vec::new();
                        encode_request(&mut encoded, &request.request);
                        parsed.push(encoded);
                        start += request.consumed;
                    }
                    Err(ParseError::Incomplete) => break,
                    Err(other) => panic!("split stream failed: {other:?}"),
                }
            }
        }
        prop_assert_eq!(start, stream.len());
        prop_assert_eq!(parsed, requests);
    }

    #[test]
    fn every_prefix_of_a_valid_request_is_incomplete(request in valid_request()) {
        for end in 0..request.len() {
            prop_assert_eq!(parse(&request[..end], &limits()), Err(ParseError::Incomplete));
        }
    }
}
