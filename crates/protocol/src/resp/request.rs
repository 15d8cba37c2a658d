//! Request parsing: multibulk (`*<count>\r\n$<len>\r\n<bytes>\r\n...`) and inline commands, as
//! Redis 7.0's `processMultibulkBuffer` and `processInlineBuffer` (`networking.c`) accept them.
//!
//! The parser is stateless: on [`ParseError::Incomplete`] the caller reads more bytes and parses
//! again from the same start. Argument positions go into a caller-owned [`Args`], reused across
//! requests, so steady-state parsing allocates nothing.
//!
//! Redis behaviours kept on purpose, all checked against redis-server 7.0.15:
//! * A request starting with `*` is multibulk; anything else is inline.
//! * A count of zero or less (`*0`, `*-1`) is skipped silently: [`parse_command`] returns it as a
//!   command with no arguments, which the caller must skip without replying.
//! * The byte after each `\r` of a count line, and the two bytes after each bulk, are skipped
//!   without being checked (`*1\r\n$4\r\nPINGxy` is a `PING`).
//! * Line searches stop at a NUL byte as C's `strchr` does, so a NUL before the line end keeps the
//!   request incomplete until the line limit is exceeded.
//!
//! One departure: Redis only checks the line limit while the line end is missing, so a longer line
//! that arrives in a single read is accepted. strata checks the first `inline_len_max + 1` bytes
//! whatever the read pattern, so the outcome never depends on how the stream was split.

use super::error::{ParseError, ProtocolError, TooLong};
use super::inline::split_inline;
use super::limits::{Limits, UNAUTHENTICATED_ARGS_MAX, UNAUTHENTICATED_BULK_LEN_MAX};
use super::number::parse_i64;

/// Where the bytes of one argument live: see [`Args`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg {
    /// `buf[start..start + len]` of the buffer given to [`parse_command`]. Every multibulk
    /// argument, and every inline argument without quotes, is of this kind.
    Input {
        /// Offset of the first byte in the input buffer.
        start: usize,
        /// Length in bytes.
        len: usize,
    },
    /// `start..start + len` of the [`Args`] scratch buffer: an inline argument with quotes or
    /// escapes, whose unescaped bytes differ from the input.
    Scratch {
        /// Offset of the first byte in the scratch buffer.
        start: usize,
        /// Length in bytes.
        len: usize,
    },
}

/// The arguments of the last parsed command: a reusable list of [`Arg`] positions plus a scratch
/// buffer for unescaped inline arguments.
///
/// Both vectors keep their capacity across [`parse_command`] calls, so after warm-up no request
/// allocates. Capacity grows to the largest command seen, bounded by the [`Limits`] and by the
/// bytes actually received; a declared count alone never reserves memory.
///
/// Arguments are read back with the same input buffer the command was parsed from:
/// ```
/// use strata_protocol::resp::{parse_command, Args, Limits};
/// let buf = b"SET k \"a b\"\r\n";
/// let mut args = Args::new();
/// let consumed = parse_command(buf, &Limits::default(), &mut args).unwrap();
/// assert_eq!(consumed, buf.len());
/// assert_eq!(args.get(buf, 2), Some(&b"a b"[..]));
/// ```
#[derive(Debug, Default)]
pub struct Args {
    list: Vec<Arg>,
    scratch: Vec<u8>,
}

impl Clone for Args {
    fn clone(&self) -> Self {
        Self {
            list: self.list.clone(),
            scratch: self.scratch.clone(),
        }
    }

    /// Copies `source` into the lists already allocated (a server that keeps parsed commands,
    /// a transaction's queue, reuses them).
    fn clone_from(&mut self, source: &Self) {
        self.list.clone_from(&source.list);
        self.scratch.clone_from(&source.scratch);
    }
}

impl Args {
    /// An empty argument list; it grows on first use.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// An argument list that holds `args_count` arguments and `scratch_bytes` unescaped inline
    /// bytes before growing.
    #[must_use]
    pub fn with_capacity(args_count: usize, scratch_bytes: usize) -> Self {
        Self {
            list: Vec::with_capacity(args_count),
            scratch: Vec::with_capacity(scratch_bytes),
        }
    }

    /// Number of arguments, command name included. Zero means "skip these bytes silently".
    #[must_use]
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when the parsed bytes were an empty inline line or `*0`/`*-1`: Redis replies nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The argument positions, for callers that store them.
    #[must_use]
    pub fn as_slice(&self) -> &[Arg] {
        &self.list
    }

    /// Bytes of argument `index`, reading [`Arg::Input`] positions from `buf`, which must be the
    /// buffer given to [`parse_command`]. `None` when `index >= len()`.
    #[must_use]
    pub fn get<'a>(&'a self, buf: &'a [u8], index: usize) -> Option<&'a [u8]> {
        self.list.get(index).map(|&arg| self.resolve(buf, arg))
    }

    /// Bytes of argument `index`, like [`Args::get`].
    ///
    /// # Panics
    /// If `index >= len()`: check the arity first.
    #[must_use]
    pub fn arg<'a>(&'a self, buf: &'a [u8], index: usize) -> &'a [u8] {
        self.resolve(buf, self.list[index])
    }

    /// Bytes of every argument in order.
    pub fn iter<'a>(&'a self, buf: &'a [u8]) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        self.list.iter().map(move |&arg| self.resolve(buf, arg))
    }

    /// Bytes of one position; panics if `buf` is not the parsed buffer and is too short.
    #[must_use]
    pub fn resolve<'a>(&'a self, buf: &'a [u8], arg: Arg) -> &'a [u8] {
        match arg {
            Arg::Input { start, len } => &buf[start..start + len],
            Arg::Scratch { start, len } => &self.scratch[start..start + len],
        }
    }

    /// Forgets all arguments, keeping capacity.
    pub fn clear(&mut self) {
        self.list.clear();
        self.scratch.clear();
    }

    pub(crate) fn push_input(&mut self, start: usize, len: usize) {
        self.list.push(Arg::Input { start, len });
    }

    pub(crate) fn scratch_len(&self) -> usize {
        self.scratch.len()
    }

    pub(crate) fn scratch_push(&mut self, bytes: &[u8]) {
        self.scratch.extend_from_slice(bytes);
    }

    /// Records `scratch[start..]` as the next argument.
    pub(crate) fn push_scratch_from(&mut self, start: usize) {
        debug_assert!(start <= self.scratch.len());
        self.list.push(Arg::Scratch {
            start,
            len: self.scratch.len() - start,
        });
    }
}

/// Parses one command from the start of `buf` into `args` and returns the bytes consumed.
///
/// On `Ok`, `args` holds the command; it may be empty (an empty inline line, `*0`, `*-1`), in
/// which case Redis executes and replies nothing: drop the consumed bytes and parse again.
/// On [`ParseError::Incomplete`], read more and call again with the same start. On
/// [`ParseError::Protocol`], send the error's reply and close the connection. `args` is
/// unspecified after an error.
pub fn parse_command(buf: &[u8], limits: &Limits, args: &mut Args) -> Result<usize, ParseError> {
    args.clear();
    match buf.first() {
        None => Err(ParseError::Incomplete),
        Some(b'*') => parse_multibulk(buf, limits, args),
        Some(_) => parse_inline(buf, limits, args),
    }
}

/// Where a line search ended.
enum Line {
    /// The terminator is at this offset.
    End(usize),
    /// Not yet seen; more bytes may bring it.
    Pending,
    /// Not within the limit: a protocol error.
    TooLong,
}

/// Searches `buf[start..]` for `terminator`, at most `line_len_max + 1` bytes, stopping at a NUL
/// as `strchr` does. Redis errors once more than `line_len_max` bytes sit unterminated.
fn find_line(buf: &[u8], start: usize, terminator: u8, line_len_max: usize) -> Line {
    debug_assert!(start <= buf.len());
    let window_end = buf
        .len()
        .min(start.saturating_add(line_len_max).saturating_add(1));
    let window = &buf[start..window_end];
    match crate::scan::find_either(window, terminator, 0) {
        Some(offset) if window[offset] == terminator => Line::End(start + offset),
        _ if buf.len() - start > line_len_max => Line::TooLong,
        _ => Line::Pending,
    }
}

/// Finds a `*`/`$` count line starting at `start` and parses its integer. Returns the integer
/// (or `None` if `string2ll` rejects it) and the offset after the line, or the error to report.
/// Always inlined: it is on the path of every argument, and the cold readers of bulk lines
/// ([`bulk_header`]) would otherwise keep the compiler from inlining it there.
#[inline(always)]
fn count_line(
    buf: &[u8],
    start: usize,
    limits: &Limits,
    too_long: ProtocolError,
) -> Result<(Option<i64>, usize), ParseError> {
    if let Some(parsed) = short_count_line(buf, start) {
        return Ok(parsed);
    }
    let carriage_return = match find_line(buf, start, b'\r', limits.inline_len_max) {
        Line::End(offset) => offset,
        Line::Pending => return Err(ParseError::Incomplete),
        Line::TooLong => return Err(too_long.into()),
    };
    // Redis needs one more byte after '\r' and skips it unchecked.
    if carriage_return + 1 >= buf.len() {
        return Err(ParseError::Incomplete);
    }
    // A '\r' right at `start` leaves no digits; the caller reports the missing '$' first.
    let digits = buf.get(start + 1..carriage_return).unwrap_or_default();
    Ok((parse_i64(digits), carriage_return + 2))
}

/// Digits a count line may have for [`short_count_line`]: every value fits an `i64`.
const SHORT_COUNT_DIGITS_MAX: usize = 18;

/// The common count line, `*`/`$`, 1 to [`SHORT_COUNT_DIGITS_MAX`] digits without a leading
/// zero, `\r` and one more byte (or the single digit `0` when two bytes follow its `\r`), read
/// without a line search. Returns what [`count_line`] returns for it, or `None` for any other
/// shape (which the general path then handles, with the same result where this one would have
/// answered).
#[inline]
fn short_count_line(buf: &[u8], start: usize) -> Option<(Option<i64>, usize)> {
    // The line search starts at the prefix byte itself: a `\r` or NUL there ends it early.
    if matches!(buf.get(start), None | Some(b'\r' | 0)) {
        return None;
    }
    // One or two digits, as nearly every count and key or small value length is: no loop.
    match buf.get(start + 1..start + 5) {
        Some(&[digit, b'\r', _, _]) if digit.is_ascii_digit() => {
            return Some((Some(i64::from(digit - b'0')), start + 4));
        }
        Some(&[tens @ b'1'..=b'9', ones, b'\r', _]) if ones.is_ascii_digit() => {
            let value = (tens - b'0') * 10 + (ones - b'0');
            return Some((Some(i64::from(value)), start + 5));
        }
        _ => {}
    }
    let line = &buf[start + 1..];
    if !matches!(line.first(), Some(b'1'..=b'9')) {
        return None;
    }
    let mut value = 0;
    for (at, &byte) in line.iter().enumerate() {
        match byte {
            b'0'..=b'9' if at < SHORT_COUNT_DIGITS_MAX => {
                value = value * 10 + i64::from(byte - b'0')
            }
            // Redis needs one more byte after '\r' and skips it unchecked.
            b'\r' if line.len() > at + 1 => return Some((Some(value), start + 1 + at + 2)),
            _ => return None,
        }
    }
    None
}

fn parse_multibulk(buf: &[u8], limits: &Limits, args: &mut Args) -> Result<usize, ParseError> {
    debug_assert_eq!(buf[0], b'*');
    let (count, mut position) = count_line(buf, 0, limits, ProtocolError::TooBigMbulkCountString)?;
    let count = match count {
        Some(count) if count <= 0 => return Ok(position),
        Some(count) if count as u64 <= limits.args_max as u64 => count as usize,
        _ => return Err(ProtocolError::InvalidMultibulkLength.into()),
    };
    if limits.auth_pending && count > UNAUTHENTICATED_ARGS_MAX {
        return Err(ProtocolError::UnauthenticatedMultibulkLength.into());
    }
    for _ in 0..count {
        position = parse_bulk(buf, position, limits, args)?;
    }
    debug_assert_eq!(args.len(), count);
    debug_assert!(position <= buf.len());
    Ok(position)
}

/// Where the command at the start of `buf` stands, for which [`parse_command`] (with the same
/// `limits`) returned [`ParseError::TooLong`]: the bytes up to its first too-long bulk's data,
/// that bulk's remaining bytes, and the arguments after it. `None` if `buf` does not hold such
/// a command.
#[must_use]
pub fn too_long_at(buf: &[u8], limits: &Limits) -> Option<TooLong> {
    find_bulk(buf, limits, |bulk| {
        (bulk.len > limits.bulk_len_max).then(|| TooLong {
            consumed: bulk.data_start,
            discard_len: bulk.len.saturating_add(2),
            args_left: bulk.count - bulk.index - 1,
        })
    })
}

/// The fewest bytes the multibulk command at the start of `buf` takes, as far as the headers
/// that arrived tell: up to the end of the first bulk whose bytes have not all arrived (the
/// arguments after it, not known yet, are left out). `None` when `buf` does not start such a
/// command: it is whole, another kind of request, not valid, or its next header has not
/// arrived. A connection grows its read buffer to this for a large argument rather than past
/// it.
#[must_use]
pub fn bytes_needed(buf: &[u8], limits: &Limits) -> Option<usize> {
    find_bulk(buf, limits, |bulk| {
        let end = bulk.data_start.checked_add(bulk.len)?.checked_add(2)?;
        (end > buf.len()).then_some(end)
    })
}

/// A bulk of a multibulk command, as [`find_bulk`] meets its header.
struct BulkAt {
    /// Its place among the command's arguments.
    index: usize,
    /// The command's arguments.
    count: usize,
    /// The length its header declares (up to `bulk_len_discard_max`).
    len: usize,
    /// Where its data starts in the buffer.
    data_start: usize,
}

/// Walks the bulk headers of the multibulk command at the start of `buf`, stepping over each
/// bulk's data without reading it (it need not have arrived), and returns what `pick` makes
/// of the first bulk it picks; `None` when it picks none before the headers end, stop at input
/// not arrived yet, or are not valid.
fn find_bulk<R>(
    buf: &[u8],
    limits: &Limits,
    mut pick: impl FnMut(&BulkAt) -> Option<R>,
) -> Option<R> {
    if buf.first() != Some(&b'*') {
        return None;
    }
    let (count, mut position) =
        count_line(buf, 0, limits, ProtocolError::TooBigMbulkCountString).ok()?;
    let count = usize::try_from(count?).ok()?;
    for index in 0..count {
        let (len, data_start) = bulk_header(buf, position, limits).ok()?;
        let bulk = BulkAt {
            index,
            count,
            len,
            data_start,
        };
        if let Some(picked) = pick(&bulk) {
            return Some(picked);
        }
        position = data_start.checked_add(len)?.checked_add(2)?;
    }
    None
}

/// Parses the `$<len>\r\n` line at the start of `buf`, as each argument of a multibulk request
/// begins, and returns the length it declares and the bytes of the line. Lengths up to
/// [`Limits::bulk_len_discard_max`] are accepted: the caller uses this to walk over the
/// arguments of a command it drops ([`ParseError::TooLong`]).
///
/// # Errors
/// [`ParseError::Incomplete`] until the line is whole; [`ParseError::Protocol`] as
/// [`parse_command`] reports a bad bulk line.
pub fn parse_bulk_header(buf: &[u8], limits: &Limits) -> Result<(usize, usize), ParseError> {
    if buf.is_empty() {
        return Err(ParseError::Incomplete);
    }
    bulk_header(buf, 0, limits)
}

/// The bulk line at `start`: the declared length, up to `bulk_len_discard_max` (checked as
/// [`refused_bulk_len`] does), and the offset of the data.
fn bulk_header(buf: &[u8], start: usize, limits: &Limits) -> Result<(usize, usize), ParseError> {
    let (len, data_start) = count_line(buf, start, limits, ProtocolError::TooBigBulkCountString)?;
    if buf[start] != b'$' {
        return Err(ProtocolError::ExpectedDollar(buf[start]).into());
    }
    let len = match len {
        Some(len) if len >= 0 && len as u64 <= limits.bulk_len_max as u64 => len as usize,
        len => match refused_bulk_len(len, limits) {
            // Within the discard limit, so a non-negative `i64`.
            ParseError::TooLong => usize::try_from(len.unwrap_or(0)).unwrap_or(usize::MAX),
            error => return Err(error),
        },
    };
    if limits.auth_pending && len > UNAUTHENTICATED_BULK_LEN_MAX {
        return Err(ProtocolError::UnauthenticatedBulkLength.into());
    }
    Ok((len, data_start))
}

/// Why a declared bulk length `len` (`None` if it is not an integer) outside
/// `0..=bulk_len_max` is refused, checked in Redis's order: past `bulk_len_discard_max` (its
/// `proto-max-bulk-len`) or negative, the length is invalid; over Redis's limit before
/// authentication, unauthenticated; otherwise the argument is merely too long
/// ([`ParseError::TooLong`]). Out of line: the common bulk never gets here.
#[cold]
#[inline(never)]
fn refused_bulk_len(len: Option<i64>, limits: &Limits) -> ParseError {
    let discard_max = limits.bulk_len_discard_max.max(limits.bulk_len_max) as u64;
    match len {
        Some(len) if len >= 0 && len as u64 <= discard_max => {
            if limits.auth_pending && len as u64 > UNAUTHENTICATED_BULK_LEN_MAX as u64 {
                ProtocolError::UnauthenticatedBulkLength.into()
            } else {
                debug_assert!(len as u64 > limits.bulk_len_max as u64);
                ParseError::TooLong
            }
        }
        _ => ProtocolError::InvalidBulkLength.into(),
    }
}

/// Parses one `$<len>\r\n<bytes>\r\n` at `start`, records it, and returns the offset after it.
fn parse_bulk(
    buf: &[u8],
    start: usize,
    limits: &Limits,
    args: &mut Args,
) -> Result<usize, ParseError> {
    let (len, data_start) = count_line(buf, start, limits, ProtocolError::TooBigBulkCountString)?;
    if buf[start] != b'$' {
        return Err(ProtocolError::ExpectedDollar(buf[start]).into());
    }
    let len = match len {
        Some(len) if len >= 0 && len as u64 <= limits.bulk_len_max as u64 => len as usize,
        len => return Err(refused_bulk_len(len, limits)),
    };
    if limits.auth_pending && len > UNAUTHENTICATED_BULK_LEN_MAX {
        return Err(ProtocolError::UnauthenticatedBulkLength.into());
    }
    // The two bytes after the data are Redis's "\r\n", skipped unchecked.
    let end = data_start.saturating_add(len).saturating_add(2);
    if buf.len() < end {
        return Err(ParseError::Incomplete);
    }
    args.push_input(data_start, len);
    Ok(end)
}

fn parse_inline(buf: &[u8], limits: &Limits, args: &mut Args) -> Result<usize, ParseError> {
    let newline = match find_line(buf, 0, b'\n', limits.inline_len_max) {
        Line::End(offset) => offset,
        Line::Pending => return Err(ParseError::Incomplete),
        Line::TooLong => return Err(ProtocolError::TooBigInlineRequest.into()),
    };
    let line_end = if newline > 0 && buf[newline - 1] == b'\r' {
        newline - 1
    } else {
        newline
    };
    split_inline(&buf[..line_end], args)?;
    Ok(newline + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes consumed and owned arguments, or the error.
    type Parsed = Result<(usize, Vec<Vec<u8>>), ParseError>;

    /// Input, bytes consumed, arguments.
    type Accepted = (&'static [u8], usize, &'static [&'static [u8]]);

    fn parse(buf: &[u8]) -> Parsed {
        parse_with(buf, &Limits::default())
    }

    fn parse_with(buf: &[u8], limits: &Limits) -> Parsed {
        let mut args = Args::new();
        let consumed = parse_command(buf, limits, &mut args)?;
        Ok((consumed, args.iter(buf).map(<[u8]>::to_vec).collect()))
    }

    fn ok(consumed: usize, args: &[&[u8]]) -> Parsed {
        Ok((consumed, args.iter().map(|a| a.to_vec()).collect()))
    }

    fn protocol(error: ProtocolError) -> Parsed {
        Err(ParseError::Protocol(error))
    }

    /// [`count_line`] without its shortcut.
    fn count_line_general(buf: &[u8], start: usize) -> Result<(Option<i64>, usize), ParseError> {
        let limits = Limits::default();
        let too_long = ProtocolError::TooBigBulkCountString;
        match find_line(buf, start, b'\r', limits.inline_len_max) {
            Line::End(offset) if offset + 1 < buf.len() => {
                let digits = buf.get(start + 1..offset).unwrap_or_default();
                Ok((parse_i64(digits), offset + 2))
            }
            Line::End(_) | Line::Pending => Err(ParseError::Incomplete),
            Line::TooLong => Err(too_long.into()),
        }
    }

    #[test]
    fn bytes_needed_counts_up_to_the_first_bulk_not_all_here() {
        let limits = Limits::default();
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1000000\r\nvvvv";
        // 30 bytes before the data, the data and its CRLF; nothing after it is known.
        assert_eq!(bytes_needed(set, &limits), Some(30 + 1_000_000 + 2));
        assert_eq!(bytes_needed(&set[..30], &limits), Some(30 + 1_000_000 + 2));
        // Its next header not here yet, whole, not multibulk, or not valid: unknown.
        assert_eq!(bytes_needed(&set[..26], &limits), None);
        assert_eq!(bytes_needed(b"*1\r\n$4\r\nPING\r\n", &limits), None);
        assert_eq!(bytes_needed(b"PING\r\n", &limits), None);
        assert_eq!(bytes_needed(b"*1\r\n$x\r\n", &limits), None);
        assert_eq!(bytes_needed(b"", &limits), None);
        // A whole first argument, a second one arriving: up to the second's end.
        let two = b"*2\r\n$4\r\nECHO\r\n$10\r\nab";
        assert_eq!(bytes_needed(two, &limits), Some(two.len() - 2 + 12));
    }

    #[test]
    fn the_count_line_shortcut_agrees_with_the_line_search() {
        let inputs: &[&[u8]] = &[
            b"$3\r\nGET",
            b"$3\r",
            b"$3\r\n",
            b"$0\r\n",
            b"$00\r\n",
            b"$01\r\n",
            b"$-1\r\n",
            b"$+1\r\n",
            b"$\r\n",
            b"$1 \r\n",
            b"$12",
            b"$10\r\n",
            b"$99\r\nx",
            b"$99\r",
            b"$05\r\n",
            b"$1\r\r\n",
            b"\r12\r\n",
            b"$999999999999999999\r\n",
            b"$9999999999999999999\r\n",
            b"$99999999999999999999\r\n",
            b"$9223372036854775807\r\n",
            b"$9223372036854775808\r\n",
            b"$1\x00\r\n",
            b"\r5\r\n",
            b"\x005\r\n",
            b"x5\r\n",
        ];
        for input in inputs {
            let limits = Limits::default();
            let too_long = ProtocolError::TooBigBulkCountString;
            assert_eq!(
                count_line(input, 0, &limits, too_long),
                count_line_general(input, 0),
                "{input:?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn count_lines_parse_as_the_line_search_does(
            body in proptest::collection::vec(proptest::sample::select(
                &b"$0123456789\r\n-+ \x00a"[..]), 0..30)) {
            let input = body;
            let limits = Limits::default();
            let too_long = ProtocolError::TooBigBulkCountString;
            proptest::prop_assert_eq!(
                count_line(&input, 0, &limits, too_long),
                count_line_general(&input, 0)
            );
        }
    }

    #[test]
    fn multibulk_accepted() {
        let table: &[Accepted] = &[
            (b"*1\r\n$4\r\nPING\r\n", 14, &[b"PING"]),
            (b"*2\r\n$3\r\nGET\r\n$0\r\n\r\n", 19, &[b"GET", b""]),
            (b"*1\r\n$4\r\nPING\r\nrest", 14, &[b"PING"]),
            (b"*1\r\n$3\r\na\r\n\r\n", 13, &[b"a\r\n"]),
            (b"*1\r\n$2\r\n\0\0\r\n", 12, &[b"\0\0"]),
            // Redis skips the bytes after '\r' and after a bulk without checking them.
            (b"*1\r\n$4\r\nPINGxy", 14, &[b"PING"]),
            (b"*1\rx$4\r\nPING\r\n", 14, &[b"PING"]),
            // Counts of zero or less are skipped silently.
            (b"*0\r\n", 4, &[]),
            (b"*-1\r\n", 5, &[]),
            (b"*-5\r\nPING\r\n", 5, &[]),
        ];
        for &(buf, consumed, args) in table {
            assert_eq!(parse(buf), ok(consumed, args), "{}", buf.escape_ascii());
        }
    }

    #[test]
    fn multibulk_incomplete() {
        let table: &[&[u8]] = &[
            b"",
            b"*",
            b"*1",
            b"*1\r",
            b"*1\r\n",
            b"*1\r\n$",
            b"*1\r\n$4\r",
            b"*1\r\n$4\r\n",
            b"*1\r\n$4\r\nPING",
            b"*1\r\n$4\r\nPING\r",
            b"*2\r\n$1\r\na\r\n",
            b"*1\r\nx",
            b"*1\0\r\n",
            b"*1\r\n$4\0\r\n",
            b"*1\r\n$536870912\r\n",
            b"*2147483647\r\n",
        ];
        for &buf in table {
            assert_eq!(
                parse(buf),
                Err(ParseError::Incomplete),
                "{}",
                buf.escape_ascii()
            );
        }
    }

    #[test]
    fn multibulk_rejected() {
        use ProtocolError::*;
        let table: &[(&[u8], ProtocolError)] = &[
            (b"*abc\r\n", InvalidMultibulkLength),
            (b"*-0\r\n", InvalidMultibulkLength),
            (b"*+1\r\n", InvalidMultibulkLength),
            (b"*01\r\n", InvalidMultibulkLength),
            (b"*1 \r\n", InvalidMultibulkLength),
            (b"*\r\n", InvalidMultibulkLength),
            (b"*2147483648\r\n", InvalidMultibulkLength),
            (b"*1\r\nx\r\n", ExpectedDollar(b'x')),
            (b"*1\r\n\r\n", ExpectedDollar(b'\r')),
            (b"*1\r\n$abc\r\n", InvalidBulkLength),
            (b"*1\r\n$-1\r\n", InvalidBulkLength),
            (b"*1\r\n$4 \r\n", InvalidBulkLength),
            (b"*1\r\n$536870913\r\n", InvalidBulkLength),
            (b"*1\r\n$99999999999999999999999\r\n", InvalidBulkLength),
        ];
        for &(buf, error) in table {
            assert_eq!(parse(buf), protocol(error), "{}", buf.escape_ascii());
        }
    }

    #[test]
    fn count_lines_are_bounded() {
        let limit = Limits::default().inline_len_max;
        let mut buf = vec![b'*'];
        buf.resize(limit, b'1');
        assert_eq!(parse(&buf), Err(ParseError::Incomplete));
        buf.push(b'1');
        assert_eq!(parse(&buf), protocol(ProtocolError::TooBigMbulkCountString));
        let mut buf = b"*1\r\n".to_vec();
        buf.resize(4 + limit + 1, b'$');
        assert_eq!(parse(&buf), protocol(ProtocolError::TooBigBulkCountString));
        buf.pop();
        assert_eq!(parse(&buf), Err(ParseError::Incomplete));
    }

    #[test]
    fn limits_are_enforced() {
        let limits = Limits {
            args_max: 2,
            bulk_len_max: 3,
            bulk_len_discard_max: 3,
            ..Limits::default()
        };
        let table: &[(&[u8], Parsed)] = &[
            (b"*2\r\n$3\r\nabc\r\n$0\r\n\r\n", ok(19, &[b"abc", b""])),
            (b"*3\r\n", protocol(ProtocolError::InvalidMultibulkLength)),
            (b"*1\r\n$4\r\n", protocol(ProtocolError::InvalidBulkLength)),
        ];
        for (buf, expected) in table {
            assert_eq!(
                &parse_with(buf, &limits),
                expected,
                "{}",
                buf.escape_ascii()
            );
        }
    }

    #[test]
    fn a_bulk_over_the_limit_within_the_discard_limit_is_too_long_not_an_error() {
        let limits = Limits {
            bulk_len_max: 3,
            bulk_len_discard_max: 100,
            ..Limits::default()
        };
        let too_long = |consumed, discard_len, args_left| {
            Some(TooLong {
                consumed,
                discard_len,
                args_left,
            })
        };
        // The command's earlier arguments are parsed; the long one's data need not be here.
        for (buf, at) in [
            (
                &b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\n"[..],
                too_long(24, 6, 0),
            ),
            (b"*3\r\n$3\r\nSET\r\n$100\r\nxy", too_long(19, 102, 1)),
        ] {
            assert_eq!(parse_with(buf, &limits), Err(ParseError::TooLong));
            assert_eq!(too_long_at(buf, &limits), at, "{}", buf.escape_ascii());
        }
        assert_eq!(too_long_at(b"*1\r\n$3\r\nabc\r\n", &limits), None);
        let table: &[(&[u8], Parsed)] = &[
            (
                b"*1\r\n$101\r\n",
                protocol(ProtocolError::InvalidBulkLength),
            ),
            (b"*1\r\n$-1\r\n", protocol(ProtocolError::InvalidBulkLength)),
            (b"*2\r\n$3\r\nabc\r\n$3\r\nde", Err(ParseError::Incomplete)),
            (b"*2\r\n$3\r\nabc\r\n$10", Err(ParseError::Incomplete)),
        ];
        for (buf, expected) in table {
            let got = parse_with(buf, &limits);
            assert_eq!(&got, expected, "{}", buf.escape_ascii());
        }
        let before_auth = Limits {
            auth_pending: true,
            bulk_len_max: 3,
            bulk_len_discard_max: 1 << 20,
            ..Limits::default()
        };
        assert_eq!(
            parse_with(b"*1\r\n$16385\r\n", &before_auth),
            protocol(ProtocolError::UnauthenticatedBulkLength),
            "Redis's limit before AUTH still closes"
        );
    }

    #[test]
    fn bulk_headers_are_read_up_to_the_discard_limit() {
        let limits = Limits {
            bulk_len_max: 3,
            bulk_len_discard_max: 100,
            ..Limits::default()
        };
        assert_eq!(parse_bulk_header(b"$100\r\nxx", &limits), Ok((100, 6)));
        assert_eq!(parse_bulk_header(b"$0\r\n", &limits), Ok((0, 4)));
        assert_eq!(
            parse_bulk_header(b"$10", &limits),
            Err(ParseError::Incomplete)
        );
        assert_eq!(parse_bulk_header(b"", &limits), Err(ParseError::Incomplete));
        for (buf, error) in [
            (&b"$101\r\n"[..], ProtocolError::InvalidBulkLength),
            (b"$x\r\n", ProtocolError::InvalidBulkLength),
            (b"*1\r\n", ProtocolError::ExpectedDollar(b'*')),
        ] {
            assert_eq!(
                parse_bulk_header(buf, &limits),
                Err(ParseError::Protocol(error))
            );
        }
    }

    #[test]
    fn auth_pending_limits() {
        let limits = Limits {
            auth_pending: true,
            ..Limits::default()
        };
        let many = b"*11\r\n";
        assert_eq!(
            parse_with(many, &limits),
            protocol(ProtocolError::UnauthenticatedMultibulkLength)
        );
        assert_eq!(parse_with(b"*10\r\n", &limits), Err(ParseError::Incomplete));
        assert_eq!(
            parse_with(b"*1\r\n$16385\r\n", &limits),
            protocol(ProtocolError::UnauthenticatedBulkLength)
        );
        assert_eq!(
            parse_with(b"*1\r\n$16384\r\n", &limits),
            Err(ParseError::Incomplete)
        );
    }

    #[test]
    fn inline_accepted() {
        let table: &[Accepted] = &[
            (b"PING\r\n", 6, &[b"PING"]),
            (b"PING\n", 5, &[b"PING"]),
            (b"\r\n", 2, &[]),
            (b"\n", 1, &[]),
            (b"   \r\n", 5, &[]),
            (b"SET  k\tv \r\nGET k\r\n", 11, &[b"SET", b"k", b"v"]),
            (b"ECHO ab\r\r\n", 10, &[b"ECHO", b"ab"]),
            (b"ECHO a\rb\n", 9, &[b"ECHO", b"a", b"b"]),
        ];
        for &(buf, consumed, args) in table {
            assert_eq!(parse(buf), ok(consumed, args), "{}", buf.escape_ascii());
        }
    }

    #[test]
    fn inline_incomplete_and_rejected() {
        for buf in [&b"PING"[..], b"PING\r", b"PING\0\r\n", b"ECHO a\0b\n"] {
            assert_eq!(
                parse(buf),
                Err(ParseError::Incomplete),
                "{}",
                buf.escape_ascii()
            );
        }
        let limit = Limits::default().inline_len_max;
        let mut buf = vec![b'x'; limit];
        assert_eq!(parse(&buf), Err(ParseError::Incomplete));
        buf.push(b'x');
        assert_eq!(parse(&buf), protocol(ProtocolError::TooBigInlineRequest));
        buf[10] = 0;
        assert_eq!(parse(&buf), protocol(ProtocolError::TooBigInlineRequest));
        assert_eq!(
            parse(b"ECHO \"a\r\n"),
            protocol(ProtocolError::UnbalancedQuotes)
        );
    }

    #[test]
    fn args_are_reused() {
        let mut args = Args::with_capacity(4, 16);
        let limits = Limits::default();
        let first = b"SET \"k\" v\r\n";
        assert_eq!(parse_command(first, &limits, &mut args), Ok(first.len()));
        assert_eq!(args.len(), 3);
        assert_eq!(args.arg(first, 1), b"k");
        assert!(matches!(args.as_slice()[1], Arg::Scratch { .. }));
        let second = b"*1\r\n$4\r\nPING\r\n";
        assert_eq!(parse_command(second, &limits, &mut args), Ok(second.len()));
        assert_eq!(args.as_slice(), &[Arg::Input { start: 8, len: 4 }]);
        assert_eq!(args.get(second, 1), None);
    }
}
