//! Decimal numbers written backwards into a stack buffer, so a reply line with several numbers
//! is assembled on the stack and appended to the output with one copy.

/// Writes `value` in decimal so that it ends just before `buf[end]`; returns where it starts.
///
/// # Panics
/// If `buf[..end]` is too short for the digits (20 bytes always suffice).
#[inline]
pub(crate) fn put_u64(buf: &mut [u8], end: usize, mut value: u64) -> usize {
    let mut start = end;
    loop {
        start -= 1;
        buf[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            return start;
        }
    }
}

/// Longest decimal `u64`.
pub const U64_LEN_MAX: usize = 20;

/// `value` in decimal, formatted into `buf` (no allocation); returns the digits.
pub fn format_u64(value: u64, buf: &mut [u8; U64_LEN_MAX]) -> &[u8] {
    let start = put_u64(buf, U64_LEN_MAX, value);
    &buf[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_digits_before_end() {
        let mut buf = [b'.'; 24];
        for value in [0, 7, 10, 64, 1234567890, u64::MAX] {
            let start = put_u64(&mut buf, 22, value);
            assert_eq!(&buf[start..22], value.to_string().as_bytes());
        }
    }
}
