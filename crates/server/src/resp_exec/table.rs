//! The command table: what `COMMAND` reports and what the dispatcher runs.
//!
//! `GET` and `SET` are recognised with one word comparison each ([`hot`]); any other name is
//! found in an index of the table by name that ignores case (`names`). Nothing is allocated.

use strata_engine::Kind;

use super::{Call, State};

mod commands;
mod names;

use crate::stats::command_index;
pub(crate) use commands::COMMANDS;

/// A command handler: reads the call's arguments and appends exactly one reply to `out`.
pub(crate) type Handler = fn(&mut State, &Call<'_>, &mut Vec<u8>);

/// One command, as `COMMAND INFO` describes it.
#[derive(Debug)]
pub(crate) struct Command {
    /// Lower-case name, as Redis names it in errors.
    pub name: &'static str,
    /// Redis arity: `n` exactly n arguments (name included), `-n` at least n.
    pub arity: i32,
    /// `COMMAND INFO` flags (`write`, `readonly`, `fast`, ...), as `COMMAND` lists them; the
    /// server acts on them through the typed fields below, read from them once, here.
    pub flags: &'static [&'static str],
    /// It may change its keys (`write`): held for writing, logged, refused by CLIENT PAUSE
    /// WRITE.
    pub writes: bool,
    /// It only reads (`readonly`).
    pub readonly: bool,
    /// It runs in constant time (`fast`): the latency monitor's `fast-command` event.
    pub fast: bool,
    /// It is an administrative command (`admin`): MONITOR does not show it.
    pub admin: bool,
    /// First key, last key (negative: from the end) and key step; zeros for no keys.
    pub keys: (i32, i32, i32),
    /// ACL category group (`string`, `keyspace`, `connection`, `server`).
    pub group: &'static str,
    /// The data type its keys must hold (WRONGTYPE otherwise), by its group: `String` for the
    /// string and bitmap commands, `Hash` for the hash ones; `None` for a command that takes a
    /// key of any type (DEL, TYPE, EXPIRE...) or none. What `Call::get_typed`,
    /// `Call::modify_typed` and the hash helpers check a key against: a new data type's
    /// commands name it here, not in their handlers.
    pub kind: Option<Kind>,
    /// Slot in `ServerStats::commands`.
    pub stat: usize,
    /// The handler.
    pub run: Handler,
    /// Whether it reads its keys' existing items, which may be on flash: a command that does
    /// waits, unconsumed, while they are read ahead (`resp_exec::flash_keys`).
    pub reads: Reads,
    /// A client may send it before authenticating, as in Redis (`CMD_NO_AUTH`).
    pub before_auth: bool,
    /// It may change what `CLIENT LIST` shows of the client (name, protocol, MULTI): the
    /// session publishes that after it runs (`crate::clients`).
    pub changes_client: bool,
    /// A pipelined batch goes on past it, and its key is read ahead with the batch's others
    /// (`Engine::prefetch`): a data command (string, bitmap, hash or keyspace group) whose
    /// first argument is its key. None of those changes what the parse of the commands behind
    /// it depends on (authentication, the limits) or how they run (MULTI, CLIENT REPLY).
    pub batches: bool,
    /// How a hash command runs on a large hash's chunks (`hash_chunks`); `OnChunks::No` for
    /// any other command. A new hash command names its way here, not in `hash_chunks`.
    pub on_chunks: OnChunks,
    /// How it differs from Redis 7.0.15, for docs/COMPATIBILITY.md; empty when it does not
    /// (the differential tests check its replies byte for byte).
    #[cfg_attr(
        not(test),
        allow(
            dead_code,
            reason = "read by the test that generates docs/COMPATIBILITY.md"
        )
    )]
    pub differs: &'static str,
}

/// How a hash command runs on a large hash (one kept in chunks, `hash_chunks`), by what it
/// names (see `Command::on_chunks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnChunks {
    /// Not a hash command: it never runs on chunks.
    No,
    /// One field, its argument 2 (HGET, HSETNX, HINCRBY...): on the chunk that holds it.
    OneField,
    /// Fields from argument 2, each `args_per_field` arguments long (2: field-value pairs,
    /// HSET and HMSET; 1: names, HDEL): chunk by chunk, the chunks' integer replies added,
    /// or `+OK` when `replies_ok` (HMSET).
    ByChunk {
        args_per_field: usize,
        replies_ok: bool,
    },
    /// Fields from argument 2, answered one by one in order (HMGET).
    EachField,
    /// The fields after `FIELDS numfields` (HEXPIRE, HTTL, HPERSIST...), one by one.
    EachExpiryField,
    /// The field count (HLEN), from the owner.
    Len,
    /// Every field (HGETALL, HKEYS, HVALS), chunk after chunk.
    EveryChunk,
    /// A page of fields by cursor (HSCAN).
    Scan,
    /// Fields drawn at random (HRANDFIELD).
    Random,
}

/// Which existing items a command reads (see `Command::reads`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reads {
    /// Those of all its keys (none for a command without keys).
    Keys,
    /// None: it replaces its keys' values whatever they were (SETEX, PSETEX, MSET).
    Nothing,
    /// SET: none without options, its key's with any (NX, XX, GET, KEEPTTL read it).
    KeyWithOptions,
}

impl Command {
    /// Whether `len` arguments (name included) satisfy the arity.
    pub fn arity_ok(&self, len: usize) -> bool {
        let arity = self.arity.unsigned_abs() as usize;
        if self.arity >= 0 {
            len == arity
        } else {
            len >= arity
        }
    }

    /// Positions of the key arguments in a call of `len` arguments (name included), by the
    /// key spec: first, last (negative: from the end), step; none for a first of 0.
    pub fn key_positions(&self, len: usize) -> impl Iterator<Item = usize> {
        let (first, last, step) = self.keys;
        let len = i32::try_from(len).unwrap_or(i32::MAX);
        let last = if last < 0 {
            len + last
        } else {
            last.min(len - 1)
        };
        let first = if first > 0 { first } else { last + 1 };
        (first..=last)
            .step_by(step.max(1).unsigned_abs() as usize)
            .map(|position| position.unsigned_abs() as usize)
    }

    /// Whether a call may name more than one key (by the key spec: a last key past the first,
    /// or counted from the end).
    pub fn may_name_several_keys(&self) -> bool {
        let (first, last, _) = self.keys;
        first > 0 && (last < 0 || last > first)
    }

    /// Commands a client may send before authenticating, as in Redis (`CMD_NO_AUTH`).
    pub fn allowed_before_auth(&self) -> bool {
        self.before_auth
    }

    /// Whether a call of `len` arguments (name included) reads its keys' existing items.
    pub fn reads_existing(&self, len: usize) -> bool {
        match self.reads {
            Reads::Keys => true,
            Reads::Nothing => false,
            Reads::KeyWithOptions => len > 3,
        }
    }
}

const READ: &[&str] = &["readonly", "fast"];
const READ_SLOW: &[&str] = &["readonly"];
const WRITE: &[&str] = &["write", "denyoom", "fast"];
const WRITE_SLOW: &[&str] = &["write", "denyoom"];
const DELETE: &[&str] = &["write", "fast"];
const CONNECTION: &[&str] = &["noscript", "loading", "stale", "fast"];
const ADMIN: &[&str] = &["admin", "noscript", "loading", "stale"];
const TRANSACTION: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];
const EXEC: &[&str] = &["noscript", "loading", "stale", "skip_slowlog"];

const ONE_KEY: (i32, i32, i32) = (1, 1, 1);
const ALL_KEYS: (i32, i32, i32) = (1, -1, 1);
const PAIRS: (i32, i32, i32) = (1, -1, 2);
const NO_KEYS: (i32, i32, i32) = (0, 0, 0);

/// Shorthand for a table row.
const fn row(
    name: &'static str,
    arity: i32,
    flags: &'static [&'static str],
    keys: (i32, i32, i32),
    group: &'static str,
    stat_name: &str,
    run: Handler,
) -> Command {
    Command {
        name,
        arity,
        flags,
        writes: has_flag(flags, "write"),
        readonly: has_flag(flags, "readonly"),
        fast: has_flag(flags, "fast"),
        admin: has_flag(flags, "admin"),
        keys,
        group,
        kind: kind_of_group(group),
        stat: command_index(stat_name),
        run,
        reads: Reads::Keys,
        before_auth: false,
        changes_client: false,
        batches: keys.0 == 1 && (kind_of_group(group).is_some() || str_eq(group, "keyspace")),
        on_chunks: OnChunks::No,
        differs: "",
    }
}

/// `command`, a hash command that runs on a large hash's chunks as `how` says.
const fn on_chunks(how: OnChunks, command: Command) -> Command {
    Command {
        on_chunks: how,
        ..command
    }
}

/// The data type the commands of ACL group `group` work on (see `Command::kind`).
const fn kind_of_group(group: &str) -> Option<Kind> {
    if str_eq(group, "string") || str_eq(group, "bitmap") {
        Some(Kind::String)
    } else if str_eq(group, "hash") {
        Some(Kind::Hash)
    } else {
        None
    }
}

/// Whether `flags` holds `flag`, in a `const fn`.
const fn has_flag(flags: &[&str], flag: &str) -> bool {
    let mut i = 0;
    while i < flags.len() {
        if str_eq(flags[i], flag) {
            return true;
        }
        i += 1;
    }
    false
}

/// `a == b`, in a `const fn`.
const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// `command`, which replaces its keys' values whatever they were (`Reads::Nothing`).
const fn blind_write(command: Command) -> Command {
    Command {
        reads: Reads::Nothing,
        ..command
    }
}

/// SET, which reads its key's item only with options (`Reads::KeyWithOptions`).
const fn reads_key_with_options(command: Command) -> Command {
    Command {
        reads: Reads::KeyWithOptions,
        ..command
    }
}

/// `command`, which a client may send before authenticating.
const fn before_auth(command: Command) -> Command {
    Command {
        before_auth: true,
        ..command
    }
}

/// `command`, which may change what `CLIENT LIST` shows of the client.
const fn changes_client(command: Command) -> Command {
    Command {
        changes_client: true,
        ..command
    }
}

/// `command`, which differs from Redis 7.0.15 as `how` says.
const fn differs(how: &'static str, command: Command) -> Command {
    Command {
        differs: how,
        ..command
    }
}

/// The table entry for a command name in any case, or `None`.
pub(crate) fn lookup(name: &[u8]) -> Option<&'static Command> {
    hot(name).or_else(|| names::find(name))
}

/// GET or SET (the table's first two rows) in any case, found with one comparison each: their
/// names are all letters, and a byte ORed with 0x20 equals a lower-case letter exactly when it
/// is that letter in either case.
pub(crate) fn hot(name: &[u8]) -> Option<&'static Command> {
    const CASE_BITS: u32 = 0x0020_2020;
    const GET: u32 = u32::from_le_bytes(*b"get\0");
    const SET: u32 = u32::from_le_bytes(*b"set\0");
    let &[a, b, c] = name else {
        return None;
    };
    match u32::from_le_bytes([a, b, c, 0]) | CASE_BITS {
        GET => Some(&COMMANDS[0]),
        SET => Some(&COMMANDS[1]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::COMMAND_NAMES;
    use strata_protocol::resp::COMMAND_NAME_LEN_MAX;

    /// Every hash command says how it runs on a large hash's chunks, and no other command
    /// does: a hash command added without it would answer "does not run ... on a large hash".
    #[test]
    fn hash_commands_and_only_they_run_on_chunks() {
        for command in COMMANDS {
            let hash = command.kind == Some(Kind::Hash);
            assert_eq!(
                command.on_chunks != OnChunks::No,
                hash,
                "{}: {:?}",
                command.name,
                command.on_chunks
            );
        }
    }

    #[test]
    fn hot_finds_get_and_set_in_any_case_and_nothing_else() {
        assert_eq!(COMMANDS[0].name, "get");
        assert_eq!(COMMANDS[1].name, "set");
        for name in ["get", "GET", "gEt", "Get"] {
            assert_eq!(hot(name.as_bytes()).map(|c| c.name), Some("get"));
        }
        for name in ["set", "SET", "sEt"] {
            assert_eq!(hot(name.as_bytes()).map(|c| c.name), Some("set"));
        }
        // Every 3-byte name that is not GET or SET in some case, including the bytes that
        // differ from a letter only in bit 0x20.
        for a in 0..=255u8 {
            for b in [
                b'e',
                b'E',
                b'e' ^ 0x20 ^ 0x40,
                0x05,
                0x25,
                0x45,
                0x65,
                0xc5,
                0xe5,
            ] {
                for c in [b't', b'T', 0x14, 0x34, 0x54, 0x74, 0xd4, 0xf4] {
                    let name = [a, b, c];
                    let want = [b"get", b"set"]
                        .iter()
                        .position(|n| name.eq_ignore_ascii_case(&n[..]))
                        .map(|i| COMMANDS[i].name);
                    assert_eq!(hot(&name).map(|c| c.name), want, "{name:?}");
                }
            }
        }
        assert!(hot(b"ge").is_none() && hot(b"gets").is_none());
    }

    #[test]
    fn key_positions_follow_the_key_spec() {
        let positions = |name: &str, len: usize| {
            let command = lookup(name.as_bytes()).unwrap();
            command.key_positions(len).collect::<Vec<_>>()
        };
        assert_eq!(positions("get", 2), [1]);
        assert_eq!(positions("mget", 4), [1, 2, 3]);
        assert_eq!(positions("mset", 5), [1, 3]);
        assert_eq!(positions("ping", 2), Vec::<usize>::new());
        // Fewer arguments than the spec names (refused later by the arity check): none past
        // the end.
        assert_eq!(positions("get", 1), Vec::<usize>::new());
    }

    #[test]
    fn names_are_unique_lower_case_and_short() {
        for (index, command) in COMMANDS.iter().enumerate() {
            assert!(command.name.len() <= COMMAND_NAME_LEN_MAX);
            assert_eq!(command.name, command.name.to_ascii_lowercase());
            assert!(COMMANDS[..index].iter().all(|c| c.name != command.name));
            assert_ne!(command.arity, 0);
        }
    }

    #[test]
    fn stats_slots_match_names() {
        assert_eq!(COMMAND_NAMES[lookup(b"GET").unwrap().stat], "get");
        assert_eq!(COMMAND_NAMES[lookup(b"set").unwrap().stat], "set");
        assert_eq!(COMMAND_NAMES[lookup(b"DeL").unwrap().stat], "delete");
        assert_eq!(COMMAND_NAMES[lookup(b"ping").unwrap().stat], "other");
        assert!(lookup(b"lpush").is_none());
        assert!(lookup(&[b'g'; 40]).is_none());
        assert_eq!(lookup(b"gEt").map(|c| c.name), Some("get"));
        assert_eq!(lookup(b"SeT").map(|c| c.name), Some("set"));
        assert_eq!(lookup(b"DEL").map(|c| c.name), Some("del"));
        // The writes that name several keys, held together in one transaction (`held`).
        let several: Vec<&str> = COMMANDS
            .iter()
            .filter(|c| c.writes && c.key_positions(5).nth(1).is_some())
            .map(|c| c.name)
            .collect();
        assert_eq!(
            several,
            ["mset", "del", "unlink", "msetnx", "rename", "renamenx", "copy"]
        );
        assert!(lookup(b"ge\x00").is_none());
        assert_eq!((COMMANDS[0].name, COMMANDS[1].name), ("get", "set"));
    }

    /// Each command's data type follows its group, and every group of one data type is typed.
    #[test]
    fn commands_name_the_data_type_they_work_on() {
        for c in COMMANDS {
            let expected = match c.group {
                "string" | "bitmap" => Some(Kind::String),
                "hash" => Some(Kind::Hash),
                _ => None,
            };
            assert_eq!(c.kind, expected, "{}", c.name);
        }
        assert_eq!(lookup(b"hset").and_then(|c| c.kind), Some(Kind::Hash));
        assert_eq!(lookup(b"hpexpire").and_then(|c| c.kind), Some(Kind::Hash));
        assert_eq!(lookup(b"incr").and_then(|c| c.kind), Some(Kind::String));
        assert_eq!(lookup(b"setbit").and_then(|c| c.kind), Some(Kind::String));
        assert_eq!(lookup(b"del").and_then(|c| c.kind), None);
        assert_eq!(lookup(b"type").and_then(|c| c.kind), None);
    }

    #[test]
    fn arity() {
        let get = lookup(b"get").unwrap();
        assert!(get.arity_ok(2) && !get.arity_ok(1) && !get.arity_ok(3));
        let set = lookup(b"set").unwrap();
        assert!(set.arity_ok(3) && set.arity_ok(9) && !set.arity_ok(2));
    }
}
