//! Property tests for the RESP module.
//!
//! Invariants checked:
//! * `parse_command` and `parse_reply` never panic on arbitrary bytes, consume at most the input,
//!   and every argument they return lies within the input or the scratch buffer.
//! * `parse_command(encode_command(args))` returns exactly `args` for arbitrary binary arguments.
//! * A pipelined stream split at any byte yields `Incomplete` on the first part and then the same
//!   commands as the whole stream.
//! * `parse_reply(encode(reply))` returns the reply in RESP3, and its RESP2 downgrade in RESP2.
//! * `glob_match` agrees with a reference matcher written independently below.
//! * `parse_i64` agrees with Rust's parser on canonical decimal text and `format_i64`.

use proptest::prelude::*;
use strata_protocol::resp::{
    encode_command, format_double, format_i64, glob_match, parse_command, parse_i64, parse_reply,
    Args, Limits, ParseError, Reply, Version, DOUBLE_LEN_MAX, I64_LEN_MAX,
};

/// Parses every complete command at the front of `buf`; returns them and the bytes consumed.
fn parse_all(buf: &[u8], args: &mut Args) -> (Vec<Vec<Vec<u8>>>, usize, ParseError) {
    let limits = Limits::default();
    let mut commands = Vec::new();
    let mut position = 0;
    loop {
        match parse_command(&buf[position..], &limits, args) {
            Ok(consumed) => {
                assert!(consumed > 0 && consumed <= buf.len() - position);
                commands.push(args.iter(&buf[position..]).map(<[u8]>::to_vec).collect());
                position += consumed;
            }
            Err(error) => return (commands, position, error),
        }
    }
}

fn arb_args() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6)
}

/// One request as bytes plus the arguments it must parse to.
fn arb_request() -> impl Strategy<Value = (Vec<u8>, Vec<Vec<u8>>)> {
    let token = prop::collection::vec(prop::sample::select(b"abcXYZ019-_".to_vec()), 1..6);
    prop_oneof![
        arb_args().prop_map(|args| {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let mut out = Vec::new();
            encode_command(&mut out, &refs);
            (out, args)
        }),
        prop::collection::vec(token, 1..4).prop_map(|tokens| {
            let mut line = tokens.join(&b' ');
            line.extend_from_slice(b"\r\n");
            (line, tokens)
        }),
        Just((b"\r\n".to_vec(), vec![])),
        Just((b"*0\r\n".to_vec(), vec![])),
        Just((
            b"SET \"a b\" 'c'\n".to_vec(),
            vec![b"SET".to_vec(), b"a b".to_vec(), b"c".to_vec()]
        )),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(buf in prop::collection::vec(any::<u8>(), 0..256)) {
        let mut args = Args::new();
        if let Ok(consumed) = parse_command(&buf, &Limits::default(), &mut args) {
            prop_assert!(consumed <= buf.len());
            prop_assert!(args.iter(&buf).all(|arg| arg.len() <= buf.len()));
        }
        if let Ok((_, consumed)) = parse_reply(&buf) {
            prop_assert!(consumed <= buf.len());
        }
    }

    #[test]
    fn resp_like_bytes_never_panic(
        parts in prop::collection::vec(prop::sample::select(vec![
            &b"*"[..], b"$", b"\r\n", b"\r", b"\n", b"1", b"2", b"-1", b"0", b"a", b" ", b"\"",
            b"'", b"\\", b"%", b"~", b"|", b"_", b",", b"#t", b"=", b"(", b"!", b">", b"\0",
        ]), 0..40)
    ) {
        let buf = parts.concat();
        let mut args = Args::new();
        let (_, consumed, _) = parse_all(&buf, &mut args);
        prop_assert!(consumed <= buf.len());
        if let Ok((_, consumed)) = parse_reply(&buf) {
            prop_assert!(consumed <= buf.len());
        }
    }

    #[test]
    fn encoded_commands_parse_back(args in arb_args()) {
        let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let mut buf = Vec::new();
        let written = encode_command(&mut buf, &refs);
        prop_assert_eq!(written, buf.len());
        let mut parsed = Args::new();
        prop_assert_eq!(parse_command(&buf, &Limits::default(), &mut parsed), Ok(buf.len()));
        let parsed: Vec<Vec<u8>> = parsed.iter(&buf).map(<[u8]>::to_vec).collect();
        prop_assert_eq!(parsed, args);
    }

    #[test]
    fn split_pipelines_parse_the_same(
        requests in prop::collection::vec(arb_request(), 1..6),
        split_seed in any::<prop::sample::Index>(),
    ) {
        let stream: Vec<u8> = requests.iter().flat_map(|(bytes, _)| bytes.clone()).collect();
        let expected: Vec<Vec<Vec<u8>>> = requests.into_iter().map(|(_, args)| args).collect();
        let mut args = Args::new();
        let (whole, consumed, error) = parse_all(&stream, &mut args);
        prop_assert_eq!(&whole, &expected);
        prop_assert_eq!((consumed, error), (stream.len(), ParseError::Incomplete));

        let split = split_seed.index(stream.len() + 1);
        let (mut commands, first_consumed, error) = parse_all(&stream[..split], &mut args);
        prop_assert_eq!(error, ParseError::Incomplete);
        let (rest, rest_consumed, _) = parse_all(&stream[first_consumed..], &mut args);
        prop_assert_eq!(first_consumed + rest_consumed, stream.len());
        commands.extend(rest);
        prop_assert_eq!(commands, expected);
    }

    #[test]
    fn replies_round_trip_in_resp3(reply in arb_reply()) {
        let mut buf = Vec::new();
        let written = reply.encode(Version::Resp3, &mut buf);
        prop_assert_eq!(written, buf.len());
        prop_assert_eq!(parse_reply(&buf), Ok((resp3_normal(&reply), buf.len())));
        for cut in 0..buf.len() {
            prop_assert!(parse_reply(&buf[..cut]).is_err());
        }
    }

    #[test]
    fn replies_round_trip_in_resp2(reply in arb_reply()) {
        let mut buf = Vec::new();
        let written = reply.encode(Version::Resp2, &mut buf);
        prop_assert_eq!(written, buf.len());
        prop_assert_eq!(parse_reply(&buf), Ok((resp2_downgrade(&reply), buf.len())));
    }

    #[test]
    fn glob_agrees_with_reference(
        pattern in prop::collection::vec(prop::sample::select(b"ab*?[]^-\\A\xc3".to_vec()), 0..10),
        string in prop::collection::vec(prop::sample::select(b"abAB-]^\\*\xc3".to_vec()), 0..10),
        nocase in any::<bool>(),
    ) {
        prop_assert_eq!(
            glob_match(&pattern, &string, nocase),
            reference_glob(&pattern, &string, nocase),
            "{} ~ {}", pattern.escape_ascii(), string.escape_ascii()
        );
    }

    #[test]
    fn integers_round_trip(value in any::<i64>()) {
        let mut buf = [0u8; I64_LEN_MAX];
        let text = format_i64(value, &mut buf);
        let expected = value.to_string();
        prop_assert_eq!(text, expected.as_bytes());
        prop_assert_eq!(parse_i64(text), Some(value));
    }

    #[test]
    fn integer_parse_matches_canonical_text(text in "-?[0-9]{1,21}") {
        let canonical = text.parse::<i64>().ok().filter(|v| v.to_string() == text);
        prop_assert_eq!(parse_i64(text.as_bytes()), canonical);
    }
}

fn arb_text() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        any::<u8>().prop_filter("no line end", |b| *b != b'\r' && *b != b'\n'),
        0..12,
    )
}

fn arb_reply() -> impl Strategy<Value = Reply> {
    let leaf = prop_oneof![
        arb_text().prop_map(Reply::Simple),
        arb_text().prop_map(Reply::Error),
        any::<i64>().prop_map(Reply::Integer),
        prop::collection::vec(any::<u8>(), 0..16).prop_map(Reply::Bulk),
        Just(Reply::Null),
        Just(Reply::NullArray),
        any::<f64>()
            .prop_filter("NaN is not equal to itself", |d| !d.is_nan())
            .prop_map(Reply::Double),
        any::<bool>().prop_map(Reply::Boolean),
        (any::<[u8; 3]>(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(format, text)| Reply::Verbatim { format, text }),
        "-?[1-9][0-9]{0,40}".prop_map(|digits| Reply::BigNumber(digits.into_bytes())),
        prop::collection::vec(any::<u8>(), 0..16).prop_map(Reply::BlobError),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        let pairs = prop::collection::vec((inner.clone(), inner.clone()), 0..3);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Reply::Array),
            prop::collection::vec(inner.clone(), 0..4).prop_map(Reply::Set),
            prop::collection::vec(inner.clone(), 0..4).prop_map(Reply::Push),
            pairs.clone().prop_map(Reply::Map),
            (pairs, inner).prop_map(|(attributes, reply)| Reply::Attribute {
                attributes,
                reply: Box::new(reply),
            }),
        ]
    })
}

/// RESP3 has one null: a null array reads back as `Null`.
fn resp3_normal(reply: &Reply) -> Reply {
    let all = |items: &[Reply]| items.iter().map(resp3_normal).collect();
    let pairs = |pairs: &[(Reply, Reply)]| {
        pairs
            .iter()
            .map(|(k, v)| (resp3_normal(k), resp3_normal(v)))
            .collect()
    };
    match reply {
        Reply::NullArray => Reply::Null,
        Reply::Array(items) => Reply::Array(all(items)),
        Reply::Set(items) => Reply::Set(all(items)),
        Reply::Push(items) => Reply::Push(all(items)),
        Reply::Map(p) => Reply::Map(pairs(p)),
        Reply::Attribute { attributes, reply } => Reply::Attribute {
            attributes: pairs(attributes),
            reply: Box::new(resp3_normal(reply)),
        },
        other => other.clone(),
    }
}

/// What a RESP2 client reads for a reply, following Redis's downgrades.
fn resp2_downgrade(reply: &Reply) -> Reply {
    let all = |items: &[Reply]| items.iter().map(resp2_downgrade).collect();
    match reply {
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) => Reply::Array(all(items)),
        Reply::Map(pairs) => Reply::Array(
            pairs
                .iter()
                .flat_map(|(k, v)| [resp2_downgrade(k), resp2_downgrade(v)])
                .collect(),
        ),
        Reply::Attribute { reply, .. } => resp2_downgrade(reply),
        Reply::Double(value) => {
            let mut buf = [0u8; DOUBLE_LEN_MAX];
            Reply::Bulk(format_double(*value, &mut buf).to_vec())
        }
        Reply::Boolean(value) => Reply::Integer(i64::from(*value)),
        Reply::Verbatim { text, .. } => Reply::Bulk(text.clone()),
        Reply::BigNumber(digits) => Reply::Bulk(digits.clone()),
        Reply::BlobError(message) => Reply::Error(
            message
                .iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// One element of a reference character class.
enum ClassItem {
    /// A `\x` escape: compared exactly, even with nocase (as Redis does).
    Escaped(u8),
    Literal(u8),
    /// Inclusive range over C signed chars.
    Range(i32, i32),
}

enum Token {
    Star,
    Any,
    Literal(u8),
    Class {
        negated: bool,
        items: Vec<ClassItem>,
    },
}

fn signed(byte: u8) -> i32 {
    i32::from(byte as i8)
}

/// Tokenizes a Redis glob. Written from the documented syntax, not from `glob.rs`.
fn tokenize(pattern: &[u8]) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < pattern.len() {
        match pattern[i] {
            b'*' => tokens.push(Token::Star),
            b'?' => tokens.push(Token::Any),
            b'\\' if i + 1 < pattern.len() => {
                i += 1;
                tokens.push(Token::Literal(pattern[i]));
            }
            b'[' => {
                i += 1;
                let negated = pattern.get(i) == Some(&b'^');
                if negated {
                    i += 1;
                }
                let mut items = Vec::new();
                while i < pattern.len() && pattern[i] != b']' {
                    if pattern[i] == b'\\' && i + 1 < pattern.len() {
                        items.push(ClassItem::Escaped(pattern[i + 1]));
                        i += 2;
                    } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' {
                        let (a, b) = (signed(pattern[i]), signed(pattern[i + 2]));
                        items.push(ClassItem::Range(a.min(b), a.max(b)));
                        i += 3;
                    } else {
                        items.push(ClassItem::Literal(pattern[i]));
                        i += 1;
                    }
                }
                tokens.push(Token::Class { negated, items });
            }
            other => tokens.push(Token::Literal(other)),
        }
        i += 1;
    }
    tokens
}

fn token_matches(token: &Token, byte: u8, nocase: bool) -> bool {
    let fold = |b: u8| if nocase { b.to_ascii_lowercase() } else { b };
    match token {
        Token::Star => unreachable!("stars are handled by the matcher"),
        Token::Any => true,
        Token::Literal(expected) => fold(*expected) == fold(byte),
        Token::Class { negated, items } => {
            let hit = items.iter().any(|item| match *item {
                ClassItem::Escaped(b) => b == byte,
                ClassItem::Literal(b) => fold(b) == fold(byte),
                ClassItem::Range(low, high) => {
                    let f = |v: i32| {
                        if nocase {
                            signed((v as u8).to_ascii_lowercase())
                        } else {
                            v
                        }
                    };
                    (f(low)..=f(high)).contains(&signed(fold(byte)))
                }
            });
            hit != *negated
        }
    }
}

/// Dynamic programming over (tokens, bytes). Redis's loop never runs on an empty string, so only
/// the empty pattern matches it.
fn reference_glob(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    if string.is_empty() {
        return pattern.is_empty();
    }
    let tokens = tokenize(pattern);
    // matches[t][s]: tokens[t..] match string[s..].
    let mut matches = vec![vec![false; string.len() + 1]; tokens.len() + 1];
    matches[tokens.len()][string.len()] = true;
    for t in (0..tokens.len()).rev() {
        for s in (0..=string.len()).rev() {
            matches[t][s] = match &tokens[t] {
                Token::Star => matches[t + 1][s] || (s < string.len() && matches[t][s + 1]),
                token => {
                    s < string.len()
                        && token_matches(token, string[s], nocase)
                        && matches[t + 1][s + 1]
                }
            };
        }
    }
    matches[0][0]
}
