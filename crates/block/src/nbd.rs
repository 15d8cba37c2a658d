//! The NBD wire format (the protocol's `doc/proto.md`): the fixed newstyle handshake, option
//! haggling and the transmission phase's requests and simple replies. Pure encoding and
//! decoding, no I/O: every field is big-endian ("network byte order") on the wire.

// The workspace denies big-endian conversions (strata's own formats are little-endian); the
// NBD protocol is big-endian by definition.
#![allow(clippy::big_endian_bytes)]

/// `NBDMAGIC`, the server's first eight bytes.
pub const INIT_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: the server's second eight bytes, and the start of every option the client sends.
pub const OPTION_MAGIC: u64 = 0x4948_4156_454f_5054;
/// The start of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// The start of every request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// The start of every simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flag: the server speaks fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can leave out the 124 zero bytes after `NBD_OPT_EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: fixed newstyle.
pub const CLIENT_FLAG_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: no zero padding after `NBD_OPT_EXPORT_NAME`.
pub const CLIENT_FLAG_NO_ZEROES: u32 = 1 << 1;

/// Options the client sends during haggling.
pub const OPT_EXPORT_NAME: u32 = 1;
/// Ends the session.
pub const OPT_ABORT: u32 = 2;
/// Lists the exports.
pub const OPT_LIST: u32 = 3;
/// Upgrades to TLS (not offered).
pub const OPT_STARTTLS: u32 = 5;
/// Describes one export.
pub const OPT_INFO: u32 = 6;
/// Describes one export and enters transmission.
pub const OPT_GO: u32 = 7;
/// Structured replies (not offered: simple replies only).
pub const OPT_STRUCTURED_REPLY: u32 = 8;

/// Option reply types.
pub const REP_ACK: u32 = 1;
/// One export of a list.
pub const REP_SERVER: u32 = 2;
/// One item of an export's description.
pub const REP_INFO: u32 = 3;
/// Error replies: the high bit set.
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
/// Refused by policy.
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
/// Malformed option.
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
/// No such export.
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
/// The server is shutting down.
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;
/// The option's data is larger than the server takes.
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

/// `NBD_REP_INFO` item: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;
/// `NBD_REP_INFO` item: block size constraints.
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
/// The export takes no writes.
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
/// `NBD_CMD_FLUSH` is understood.
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
/// `NBD_CMD_FLAG_FUA` is understood.
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
/// `NBD_CMD_TRIM` is understood.
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
/// `NBD_CMD_WRITE_ZEROES` (and `NBD_CMD_FLAG_NO_HOLE`) is understood.
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Flushes and FUA are visible across every connection to the export.
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
/// `NBD_CMD_CACHE` is understood.
pub const TFLAG_SEND_CACHE: u16 = 1 << 10;

/// Request types.
pub const CMD_READ: u16 = 0;
/// Write the payload that follows the request.
pub const CMD_WRITE: u16 = 1;
/// Soft disconnect.
pub const CMD_DISC: u16 = 2;
/// Make every completed write durable.
pub const CMD_FLUSH: u16 = 3;
/// The range's contents are no longer needed.
pub const CMD_TRIM: u16 = 4;
/// Prefetch the range (advisory).
pub const CMD_CACHE: u16 = 5;
/// Write zeroes over the range.
pub const CMD_WRITE_ZEROES: u16 = 6;

/// Command flag: force unit access (durable before the reply).
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag (`WRITE_ZEROES`): allocate, do not punch a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;

/// Error values of replies (errno numbers, fixed by the protocol whatever the platform).
pub const EPERM: u32 = 1;
/// Input/output error.
pub const EIO: u32 = 5;
/// Invalid argument (bad range, alignment, flags, unknown command).
pub const EINVAL: u32 = 22;
/// A write past the end of the export.
pub const ENOSPC: u32 = 28;
/// The server is shutting down.
pub const ESHUTDOWN: u32 = 108;

/// Bytes of a request header.
pub const REQUEST_BYTES: usize = 28;
/// Bytes of the 124 zeroes after `NBD_OPT_EXPORT_NAME`'s reply without `NO_ZEROES`.
pub const EXPORT_NAME_ZEROES_BYTES: usize = 124;

/// The server's opening: magic, `IHAVEOPT`, handshake flags.
pub fn greeting() -> [u8; 18] {
    let mut out = [0u8; 18];
    out[0..8].copy_from_slice(&INIT_MAGIC.to_be_bytes());
    out[8..16].copy_from_slice(&OPTION_MAGIC.to_be_bytes());
    out[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    out
}

/// The client's flags, or why they are refused (an unknown flag ends the session).
pub fn parse_client_flags(bytes: [u8; 4]) -> Result<u32, String> {
    let flags = u32::from_be_bytes(bytes);
    let known = CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES;
    if flags & !known != 0 {
        return Err(format!("unknown client flags {flags:#x}"));
    }
    Ok(flags)
}

/// An option header: `(option, data length)`, or why it is not one.
pub fn parse_option_header(bytes: [u8; 16]) -> Result<(u32, u32), String> {
    let magic = u64::from_be_bytes(bytes[0..8].try_into().expect("8 bytes"));
    if magic != OPTION_MAGIC {
        return Err(format!("option magic {magic:#x}"));
    }
    let option = u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let length = u32::from_be_bytes(bytes[12..16].try_into().expect("4 bytes"));
    Ok((option, length))
}

/// An option reply: header and data.
pub fn option_reply(option: u32, reply_type: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + data.len());
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// `NBD_REP_SERVER`'s data: the export's name.
pub fn server_reply_data(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + name.len());
    out.extend_from_slice(&(name.len() as u32).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    out
}

/// `NBD_INFO_EXPORT`'s data: size and transmission flags.
pub fn info_export_data(size_bytes: u64, transmission_flags: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    out.extend_from_slice(&size_bytes.to_be_bytes());
    out.extend_from_slice(&transmission_flags.to_be_bytes());
    out
}

/// `NBD_INFO_BLOCK_SIZE`'s data: minimum, preferred and largest payload, bytes.
pub fn info_block_size_data(minimum: u32, preferred: u32, payload_max: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(14);
    out.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    out.extend_from_slice(&minimum.to_be_bytes());
    out.extend_from_slice(&preferred.to_be_bytes());
    out.extend_from_slice(&payload_max.to_be_bytes());
    out
}

/// What `NBD_OPT_INFO` and `NBD_OPT_GO` ask for.
#[derive(Debug, PartialEq, Eq)]
pub struct InfoRequest {
    /// The export's name (empty: the default export).
    pub name: String,
    /// The information items asked for.
    pub items: Vec<u16>,
}

/// Parses the data of `NBD_OPT_INFO` / `NBD_OPT_GO`, or says why it is invalid.
pub fn parse_info_request(data: &[u8]) -> Result<InfoRequest, String> {
    let name_len = data
        .get(0..4)
        .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
        .ok_or("shorter than its name's length")?;
    let name_end = 4usize
        .checked_add(name_len)
        .filter(|&end| end + 2 <= data.len())
        .ok_or("name longer than the option")?;
    let name = std::str::from_utf8(&data[4..name_end])
        .map_err(|_| "name is not UTF-8")?
        .to_string();
    let count =
        u16::from_be_bytes(data[name_end..name_end + 2].try_into().expect("2 bytes")) as usize;
    let items_bytes = &data[name_end + 2..];
    if items_bytes.len() != count * 2 {
        return Err(format!(
            "{count} information requests in {} bytes",
            items_bytes.len()
        ));
    }
    let items = items_bytes
        .chunks_exact(2)
        .map(|b| u16::from_be_bytes([b[0], b[1]]))
        .collect();
    Ok(InfoRequest { name, items })
}

/// `NBD_OPT_EXPORT_NAME`'s reply: size, transmission flags, and the zeroes unless the client
/// asked for none.
pub fn export_name_reply(size_bytes: u64, transmission_flags: u16, zeroes: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(10 + EXPORT_NAME_ZEROES_BYTES);
    out.extend_from_slice(&size_bytes.to_be_bytes());
    out.extend_from_slice(&transmission_flags.to_be_bytes());
    if zeroes {
        out.resize(out.len() + EXPORT_NAME_ZEROES_BYTES, 0);
    }
    out
}

/// A request of the transmission phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// `NBD_CMD_FLAG_*` bits.
    pub flags: u16,
    /// `NBD_CMD_*`.
    pub command: u16,
    /// Echoed in the reply.
    pub cookie: u64,
    /// Byte offset in the export.
    pub offset: u64,
    /// Bytes (of payload, for a write).
    pub length: u32,
}

/// Parses a request header, or says why it is not one (a bad magic ends the session: the
/// stream can no longer be trusted to be in step).
pub fn parse_request(bytes: &[u8; REQUEST_BYTES]) -> Result<Request, String> {
    let magic = u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes"));
    if magic != REQUEST_MAGIC {
        return Err(format!("request magic {magic:#x}"));
    }
    Ok(Request {
        flags: u16::from_be_bytes(bytes[4..6].try_into().expect("2 bytes")),
        command: u16::from_be_bytes(bytes[6..8].try_into().expect("2 bytes")),
        cookie: u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes")),
        offset: u64::from_be_bytes(bytes[16..24].try_into().expect("8 bytes")),
        length: u32::from_be_bytes(bytes[24..28].try_into().expect("4 bytes")),
    })
}

/// Encodes a request header (for tests and tools).
pub fn encode_request(request: &Request) -> [u8; REQUEST_BYTES] {
    let mut out = [0u8; REQUEST_BYTES];
    out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&request.flags.to_be_bytes());
    out[6..8].copy_from_slice(&request.command.to_be_bytes());
    out[8..16].copy_from_slice(&request.cookie.to_be_bytes());
    out[16..24].copy_from_slice(&request.offset.to_be_bytes());
    out[24..28].copy_from_slice(&request.length.to_be_bytes());
    out
}

/// A simple reply's header (a read's data follows it when `error` is 0).
pub fn simple_reply(error: u32, cookie: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out[4..8].copy_from_slice(&error.to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_greeting_spells_the_magics_and_offers_fixed_newstyle_without_zeroes() {
        let g = greeting();
        assert_eq!(&g[0..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(&g[16..18], &[0, 3]);
    }

    #[test]
    fn unknown_client_flags_are_refused() {
        assert_eq!(parse_client_flags([0, 0, 0, 3]), Ok(3));
        assert!(parse_client_flags([0, 0, 0, 4]).is_err());
        assert!(parse_client_flags([0x80, 0, 0, 1]).is_err());
    }

    #[test]
    fn an_option_header_needs_its_magic() {
        let mut bytes = [0u8; 16];
        bytes[0..8].copy_from_slice(b"IHAVEOPT");
        bytes[8..12].copy_from_slice(&7u32.to_be_bytes());
        bytes[12..16].copy_from_slice(&9u32.to_be_bytes());
        assert_eq!(parse_option_header(bytes), Ok((7, 9)));
        bytes[0] = b'X';
        assert!(parse_option_header(bytes).is_err());
    }

    #[test]
    fn info_requests_are_checked_against_their_own_lengths() {
        let mut data = Vec::new();
        data.extend_from_slice(&4u32.to_be_bytes());
        data.extend_from_slice(b"disk");
        data.extend_from_slice(&2u16.to_be_bytes());
        data.extend_from_slice(&0u16.to_be_bytes());
        data.extend_from_slice(&3u16.to_be_bytes());
        assert_eq!(
            parse_info_request(&data),
            Ok(InfoRequest {
                name: "disk".into(),
                items: vec![0, 3]
            })
        );
        // A name longer than the option, a count that does not match, no count at all.
        let mut long_name = data.clone();
        long_name[0..4].copy_from_slice(&400u32.to_be_bytes());
        assert!(parse_info_request(&long_name).is_err());
        let mut bad_count = data.clone();
        bad_count[8..10].copy_from_slice(&3u16.to_be_bytes());
        assert!(parse_info_request(&bad_count).is_err());
        assert!(parse_info_request(&data[..8]).is_err());
        assert!(parse_info_request(&[0, 0]).is_err());
        let mut huge = vec![0xff, 0xff, 0xff, 0xff];
        huge.extend_from_slice(&[0, 0]);
        assert!(parse_info_request(&huge).is_err());
    }

    #[test]
    fn requests_round_trip_and_a_bad_magic_is_refused() {
        let request = Request {
            flags: CMD_FLAG_FUA,
            command: CMD_WRITE,
            cookie: 0x0102_0304_0506_0708,
            offset: 1 << 40,
            length: 4096,
        };
        let bytes = encode_request(&request);
        assert_eq!(parse_request(&bytes), Ok(request));
        let mut bad = bytes;
        bad[0] ^= 1;
        assert!(parse_request(&bad).is_err());
    }

    #[test]
    fn replies_carry_their_magics() {
        assert_eq!(
            &simple_reply(EIO, 9)[0..8],
            &[0x67, 0x44, 0x66, 0x98, 0, 0, 0, 5]
        );
        let reply = option_reply(OPT_GO, REP_ACK, &[]);
        assert_eq!(reply.len(), 20);
        assert_eq!(&reply[0..8], &OPTION_REPLY_MAGIC.to_be_bytes());
        assert_eq!(export_name_reply(512, 1, true).len(), 134);
        assert_eq!(export_name_reply(512, 1, false).len(), 10);
    }
}
