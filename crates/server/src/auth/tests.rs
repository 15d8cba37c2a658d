//! The auth file parser and the secret comparison.

use super::*;

fn parse(bytes: &[u8]) -> Result<Credentials, AuthFileError> {
    Credentials::parse(Path::new("/etc/strata/auth"), bytes)
}

/// The line a refused file is refused at, with the error's message.
fn refused_at(bytes: &[u8]) -> (usize, String) {
    match parse(bytes) {
        Err(error @ AuthFileError::Malformed { line, .. }) => (line, error.to_string()),
        other => panic!("{} not malformed: {other:?}", bytes.escape_ascii()),
    }
}

#[test]
fn entries_are_user_colon_password_lines() {
    let credentials = parse(b"foo:bar\nbaaaz:quux\n").expect("valid");
    assert_eq!(credentials.len(), 2);
    assert!(credentials.check(b"foo", b"bar"));
    assert!(credentials.check(b"baaaz", b"quux"));
    assert!(
        !credentials.check(b"foo", b"quux"),
        "a password of another user"
    );
    assert!(!credentials.check(b"foo", b"ba"));
    assert!(!credentials.check(b"foo", b"barr"));
    assert!(!credentials.check(b"fo", b"bar"));
    assert!(!credentials.check(b"", b""));
    assert_eq!(credentials.path(), Path::new("/etc/strata/auth"));
}

#[test]
fn line_ends_and_colons_in_passwords() {
    // CRLF lines, a last line without a newline (memcached 1.6.18 dropped its last byte), and
    // a password with colons (the first colon ends the user).
    let credentials = parse(b"a:b\r\nc:d:e:\r\nlast:line").expect("valid");
    assert!(credentials.check(b"a", b"b"));
    assert!(credentials.check(b"c", b"d:e:"));
    assert!(credentials.check(b"last", b"line"));
    assert!(!credentials.check(b"last", b"lin"));
    // Tabs are not spaces: the token splits on spaces only, so they can be sent.
    assert!(parse(b"tab\tuser:pass\tword\n")
        .expect("valid")
        .check(b"tab\tuser", b"pass\tword"));
}

#[test]
fn unusable_lines_are_refused_with_their_number() {
    for (bytes, line, needle) in [
        (&b"nocolon\n"[..], 1, "no ':'"),
        (b"a:b\n\nc:d\n", 2, "empty line"),
        (b"a:b\n\n", 2, "empty line"),
        (b":pass\n", 1, "empty user or password"),
        (b"user:\n", 1, "empty user or password"),
        (b"a:b\nmy user:pass\n", 2, "space"),
        (b"user:pass word\n", 1, "space"),
        (b"user:pa\0ss\n", 1, "NUL"),
        (b"user:pa\rss\n", 1, "carriage return"),
        (b"# a comment\n", 1, "no ':'"),
    ] {
        let (at, message) = refused_at(bytes);
        assert_eq!(at, line, "{}: {message}", bytes.escape_ascii());
        assert!(message.contains(needle), "{message}");
        assert!(message.contains("/etc/strata/auth"), "{message}");
        assert!(message.contains(&format!("line {line}")), "{message}");
    }
}

#[test]
fn an_empty_file_is_refused() {
    for bytes in [&b""[..], b"\n"] {
        let error = parse(bytes).expect_err("empty");
        assert!(matches!(error, AuthFileError::Empty { .. }), "{error:?}");
        assert!(error.to_string().contains("empty"), "{error}");
    }
}

#[test]
fn entries_and_lines_are_bounded() {
    let entries = |n: usize| {
        (0..n)
            .map(|i| format!("user{i}:pass{i}\n"))
            .collect::<String>()
    };
    let full = parse(entries(AUTH_ENTRIES_MAX).as_bytes()).expect("at the limit");
    assert_eq!(full.len(), AUTH_ENTRIES_MAX);
    assert!(full.check(b"user7", b"pass7"), "the last entry counts");
    match parse(entries(AUTH_ENTRIES_MAX + 1).as_bytes()) {
        Err(AuthFileError::TooManyEntries { line, .. }) => assert_eq!(line, AUTH_ENTRIES_MAX + 1),
        other => panic!("{other:?}"),
    }
    let longest = format!("u:{}", "p".repeat(AUTH_ENTRY_LEN_MAX - 2));
    assert!(parse(longest.as_bytes()).is_ok(), "{} bytes", longest.len());
    let (line, message) = refused_at(format!("{longest}p\n").as_bytes());
    assert_eq!(line, 1);
    assert!(message.contains("254"), "{message}");
}

#[test]
fn load_reads_the_file_and_names_it_when_it_cannot() {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("strata-auth-{}.txt", std::process::id()));
    std::fs::write(&path, b"foo:bar\n").expect("write");
    let credentials = Credentials::load(&path).expect("valid file");
    assert!(credentials.check(b"foo", b"bar"));
    std::fs::write(&path, vec![b'x'; AUTH_FILE_BYTES_MAX + 1]).expect("write");
    let error = Credentials::load(&path).expect_err("too large");
    assert!(matches!(error, AuthFileError::TooLarge { .. }), "{error:?}");
    std::fs::remove_file(&path).expect("remove");
    let error = Credentials::load(&path).expect_err("gone");
    assert!(
        matches!(error, AuthFileError::Unreadable { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains(&path.display().to_string()),
        "{error}"
    );
}

#[test]
fn debug_output_shows_no_secret() {
    let credentials = parse(b"someone:hunter2\n").expect("valid");
    let shown = format!("{credentials:?}");
    assert!(
        !shown.contains("hunter2") && !shown.contains("someone"),
        "{shown}"
    );
    assert!(shown.contains("entries: 1"), "{shown}");
}

#[test]
fn constant_time_eq_is_equality() {
    for (given, secret) in [
        (&b""[..], &b""[..]),
        (b"a", b"a"),
        (b"secret", b"secret"),
        (b"secret", b"secreT"),
        (b"secret", b"secre"),
        (b"secre", b"secret"),
        (b"", b"x"),
        (b"x", b""),
        (b"\0", b""),
        (b"ab\0", b"ab"),
    ] {
        assert_eq!(
            constant_time_eq(given, secret),
            given == secret,
            "{} vs {}",
            given.escape_ascii(),
            secret.escape_ascii()
        );
    }
}
