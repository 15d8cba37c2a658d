//! Large hashes: a hash whose compact encoding would pass a few KiB is kept as chunks
//! (`strata_types::hash_chunks`: an owner record with the linear-hashing state, and parts in
//! the compact encoding), so that a field's write rewrites one chunk, not the whole hash.
//!
//! The hash commands are written once, for the compact encoding (`hashes.rs`,
//! `hash_expiry.rs`). On a large hash they run on its chunks: a command's fields are routed
//! to their chunks, and the command runs on each chunk it touches with those fields only,
//! through a [`ChunkDoor`] that shows the chunk as the key's hash; the replies are then
//! joined (integers added, arrays and maps concatenated). Commands over every field (HLEN,
//! HGETALL, HKEYS, HVALS, HSCAN, HRANDFIELD) walk the chunks. An owner and its parts share a
//! shard, and a large hash is only reached with its key held by a transaction
//! (`Engine::transaction`: the command reruns held when it meets one, [`Call::want_held`]), so
//! nobody sees a chunk half written. A write runs in a logged transaction (on a pool), so a
//! command that writes several chunks is all there after a crash or not at all.
//!
//! A chunk a write leaves past `CHUNK_SPLIT_BYTES` makes the hash split one chunk (linear
//! hashing's next); its writes go new chunk, owner, old chunk, each durable before the next,
//! so a crash between leaves a hash whose every field is found (see the types' module docs).
//! A chunk emptied by a delete stays, as an empty part; the key goes when its last field
//! does (the owner's count says when). The owner's record expires at the key's own expiry (EXPIRE); unlike a compact hash,
//! a large hash whose fields all expired stays a key until then (reads find no field). Every
//! command that writes a chunk writes the owner again after it (a few dozen bytes), so the
//! hash's CAS changes with each write, as WATCH needs.

use std::cell::Cell;

use strata_engine::{
    Change, Door, Expiry, Families, FamilyBroken, ItemRef, Kind, Observed, WriteError,
};
use strata_protocol::resp::{encode, name_eq, parse_command, parse_i64, Args, Limits, Version};
use strata_types::hash::{set_key_expiry, Builder, Hash};
use strata_types::hash_chunks::{chunk_bits, chunk_tag, is_chunked, Chunked, CHUNK_SPLIT_BYTES};

use super::table::OnChunks;
use super::{table, write_error, Call, State};

/// Most capacity of the scratch buffer a connection keeps between commands on large hashes
/// (`State::chunk_scratch`): a chunk and its growth fit many times over; one grown for a
/// field of its own past this is dropped after its command.
pub(crate) const SCRATCH_KEPT_BYTES_MAX: usize = 64 << 10;

/// Reply for a large hash whose owner or a chunk does not decode.
const ERR_DAMAGED: &[u8] = b"-ERR the stored hash is damaged (strata could not decode it)\r\n";

/// One chunk of a large hash, shown to the compact hash commands as the key's hash.
struct ChunkDoor<'a> {
    families: &'a dyn Families,
    owner: &'a [u8],
    state: Chunked,
    chunk: u32,
    /// Where a write builds the chunk's new encoding (lent by the command's [`Large`]).
    scratch: Cell<Vec<u8>>,
    /// The chunk's length after this door's write (0: emptied), `None` before one.
    written_len: Cell<Option<usize>>,
    /// What this door's write changed the entries stored, and those with an expiry, by.
    counts_delta: Cell<(i64, i64)>,
    /// The entries the chunk stores after this door's write.
    counts_after: Cell<i64>,
    /// The latest expiry of a field the chunk holds after this door's write (`None`: no field
    /// of it expires), which the owner's bound on its fields' expiries takes.
    latest_expiry_after: Cell<Option<u64>>,
    /// The owner owns this chunk and the index lacks it ([`FamilyBroken`]: its record was
    /// found damaged). The command runs on no fields and writes nothing, and its reply is
    /// replaced by [`ERR_DAMAGED`] (the engine drops the hash whole at its next repair).
    broken: Cell<bool>,
}

/// The entries a chunk's bytes store, and those with an expiry (0 for none or damage).
fn counts_of(bytes: Option<&[u8]>) -> (i64, i64) {
    bytes
        .and_then(|bytes| Hash::open(bytes).ok())
        .map_or((0, 0), |hash| {
            let count = i64::try_from(hash.stored_len()).unwrap_or(i64::MAX);
            (
                count,
                i64::try_from(hash.expiring_len()).unwrap_or(i64::MAX),
            )
        })
}

impl<'a> ChunkDoor<'a> {
    fn new(families: &'a dyn Families, owner: &'a [u8], state: Chunked, chunk: u32) -> Self {
        ChunkDoor {
            families,
            owner,
            state,
            chunk,
            scratch: Cell::new(Vec::new()),
            written_len: Cell::new(None),
            counts_delta: Cell::new((0, 0)),
            counts_after: Cell::new(0),
            latest_expiry_after: Cell::new(None),
            broken: Cell::new(false),
        }
    }

    /// Runs `f` on the chunk's encoding (`None` when it holds no field), borrowed where it
    /// is the chunk's own, else as [`ChunkDoor::load`] filters it.
    fn with_chunk<R>(&self, f: impl FnOnce(Option<&[u8]>) -> R) -> R {
        let mut f = Some(f);
        let mut answer = None;
        let read = self
            .families
            .read_part_dyn(self.owner, self.chunk, &mut |value| {
                let fresh = value.is_empty()
                    || Hash::open(value).map_or(true, |hash| {
                        !self
                            .state
                            .stale(self.chunk, chunk_bits(hash.key_expiry_ms()))
                    });
                if let Some(f) = f.take_if(|_| fresh) {
                    answer = Some(f(Some(value).filter(|value| !value.is_empty())));
                }
            });
        if read.is_err() {
            self.broken.set(true);
            return f.take().expect("not run on a broken chunk")(None);
        }
        // Not found, or stale: read again, filtered (an absent chunk reads as no field).
        match f {
            Some(f) => f(self.load().as_deref()),
            None => answer.expect("f ran"),
        }
    }

    /// The chunk's encoding, `None` when it holds no field. Fields a split a crash cut short
    /// left behind (they route to another chunk now) are dropped from what is shown.
    fn load(&self) -> Option<Vec<u8>> {
        let mut bytes = Vec::new();
        let read = self
            .families
            .read_part_dyn(self.owner, self.chunk, &mut |value| {
                // Room for a write's growth too: the modify builds its encoding beside it.
                bytes.reserve_exact(value.len());
                bytes.extend_from_slice(value);
            });
        let found = read.unwrap_or_else(|FamilyBroken| {
            self.broken.set(true);
            false
        });
        if !found || bytes.is_empty() {
            return None;
        }
        let Ok(hash) = Hash::open(&bytes) else {
            return Some(bytes); // Damaged: the command's own checks answer it.
        };
        if !self
            .state
            .stale(self.chunk, chunk_bits(hash.key_expiry_ms()))
        {
            return Some(bytes);
        }
        let Ok(hash) = Hash::parse(&bytes) else {
            return Some(bytes);
        };
        let mut kept = Vec::new();
        let mut builder = Builder::new(&mut kept);
        for field in hash.stored() {
            if self.state.owns(self.chunk, field.name) {
                builder.push(field);
            }
        }
        (builder.finish(None) > 0).then_some(kept)
    }

    /// [`Door::modify`] with the new encoding built in `buffer` (empty).
    fn modify_in(
        &self,
        buffer: &mut Vec<u8>,
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        let (change, old) = self.with_chunk(|bytes| {
            buffer.reserve(bytes.map_or(0, <[u8]>::len) + 128);
            let item = bytes.map(|bytes| chunk_item(self.owner, bytes));
            (f(item, buffer), counts_of(bytes))
        });
        if self.broken.get() {
            return Ok(None); // Never written over: the hash is dropped whole, not repaired.
        }
        debug_assert!(
            !matches!(change, Change::Touch { .. }),
            "touches are of strings, never of a chunk"
        );
        if matches!(change, Change::Keep | Change::Read) {
            return Ok(None);
        }
        if matches!(change, Change::Delete) {
            buffer.clear();
        } else {
            set_key_expiry(buffer, chunk_tag(self.state.bits_of(self.chunk)));
        }
        self.families.write_part(self.owner, self.chunk, buffer)?;
        self.written_len.set(Some(buffer.len()));
        let new = counts_of(Some(buffer));
        self.counts_delta.set((new.0 - old.0, new.1 - old.1));
        self.counts_after.set(new.0);
        let latest = Hash::open(buffer)
            .ok()
            .and_then(|hash| hash.latest_expiry_ms());
        self.latest_expiry_after.set(latest);
        Ok(Some(0))
    }
}

/// The item a chunk's bytes show the hash commands.
fn chunk_item<'v>(key: &'v [u8], value: &'v [u8]) -> ItemRef<'v> {
    ItemRef {
        key,
        value,
        record_value: value,
        client_flags: 0,
        cas: 0,
        expires_at_ms: None,
        kind: Kind::Hash,
        parts: 0,
        fetched: true,
        reads: 0,
        on_flash: false,
    }
}

impl Door for ChunkDoor<'_> {
    fn read<R>(&self, key: &[u8], _bump: bool, f: impl FnOnce(ItemRef<'_>) -> R) -> Option<R> {
        debug_assert_eq!(key, self.owner, "a chunk is reached by its hash's key only");
        self.with_chunk(|bytes| bytes.map(|bytes| f(chunk_item(self.owner, bytes))))
    }

    fn modify(
        &self,
        key: &[u8],
        f: impl FnOnce(Option<ItemRef<'_>>, &mut Vec<u8>) -> Change,
    ) -> Result<Option<u64>, WriteError> {
        debug_assert_eq!(key, self.owner, "a chunk is reached by its hash's key only");
        // The new encoding is built beside the chunk, which is borrowed, not copied.
        let mut buffer = self.scratch.take();
        buffer.clear();
        let result = self.modify_in(&mut buffer, f);
        self.scratch.set(buffer);
        result
    }

    fn set(&self, _: &[u8], _: &[u8], _: u32, _: Expiry) -> Result<u64, WriteError> {
        Err(WriteError::WrongKind) // No hash command writes a string.
    }

    fn contains(&self, _: &[u8]) -> bool {
        self.load().is_some()
    }

    fn observe(&self, _: &[u8]) -> Observed {
        Observed {
            item: None,
            expired: None,
            removals: 0,
        }
    }

    fn memory_usage(&self, _: &[u8]) -> Option<u64> {
        None
    }
}

/// The large hash at `key` as the call's keys hold it: its state, or `None` when the key
/// holds no large hash (any more: it may have changed before the command reran held).
fn owner_state(call: &Call<'_>, key: &[u8]) -> Option<Result<Chunked, ()>> {
    let found = call.keys().peek(key, |item| {
        (item.kind == Kind::Hash && is_chunked(item.value))
            .then(|| Chunked::parse(item.value).map_err(|_| ()))
    });
    call.looked_up(found.is_some());
    found.flatten()
}

/// Runs the hash command `call` on the large hash at its key, which the call holds (the
/// command met the large hash and asked to run held). A key that holds no large hash by now
/// runs the command as it is.
pub(crate) fn run(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let key = call.arg(1);
    let keys = call.keys();
    let Some(families) = keys.families() else {
        encode::error(out, b"ERR a large hash was reached without its key held");
        return;
    };
    let owner = match owner_state(call, key) {
        None => {
            // No large hash here (any more): the hint that sent the command here is stale.
            state.large_hash_hint = None;
            return (call.command.run)(state, call, out);
        }
        Some(Err(())) => return out.extend_from_slice(ERR_DAMAGED),
        Some(Ok(owner)) => owner,
    };
    let reply_start = out.len();
    let large = Large {
        families,
        key,
        scratch: Cell::new(std::mem::take(&mut state.chunk_scratch)),
        owner: Cell::new(owner),
        oversized: Cell::new(0),
        emptied: Cell::new(false),
        changed: Cell::new(false),
        broken: Cell::new(false),
    };
    let result = match call.command.on_chunks {
        OnChunks::OneField => large.on_field(state, call, out),
        OnChunks::ByChunk {
            args_per_field,
            replies_ok,
        } => large.by_chunk(state, call, (args_per_field, replies_ok), out),
        OnChunks::EachField => large.each_field(state, call, 2, out),
        OnChunks::EachExpiryField => match fields_at(call) {
            Some(at) => large.each_field(state, call, at, out),
            None => large.on_chunk_whole(state, call, 0, out), // Its own error reply.
        },
        OnChunks::Len => large.len(call, out),
        OnChunks::EveryChunk => large.every_chunk(state, call, out),
        OnChunks::Scan => large.scan(state, call, out),
        OnChunks::Random => large.random(state, call, out),
        OnChunks::No => {
            let name = call.command.name;
            let message = format!("ERR strata does not run {name} on a large hash yet");
            encode::error(out, message.as_bytes());
            Ok(())
        }
    };
    // A broken chunk met: nothing more is written (no owner, split or removal).
    let settled = result.and_then(|()| match large.broken.get() {
        true => Ok(()),
        false => large.settle(call),
    });
    if large.broken.get() {
        out.truncate(reply_start);
        out.extend_from_slice(ERR_DAMAGED);
    } else if let Err(error) = settled {
        out.truncate(reply_start);
        write_error(out, &error);
    }
    let mut scratch = large.scratch.take();
    if scratch.capacity() <= SCRATCH_KEPT_BYTES_MAX {
        scratch.clear();
        state.chunk_scratch = scratch;
    }
}

/// Where a field-expiry command's field list starts: the argument after `FIELDS numfields`,
/// when the list is exactly what it says; `None` for a malformed one (the command's own
/// parse answers it).
fn fields_at(call: &Call<'_>) -> Option<usize> {
    (2..call.len().min(6)).find_map(|at| {
        let count = usize::try_from(parse_i64(call.args_from(at + 1).next()?)?).ok()?;
        (name_eq(call.arg(at), b"fields") && at + 2 + count == call.len() && count > 0)
            .then_some(at + 2)
    })
}

/// A large hash a command is running on.
struct Large<'a> {
    families: &'a dyn Families,
    key: &'a [u8],
    /// Where chunk writes and the owner's rewrite build their encodings (lent to each
    /// [`ChunkDoor`] in turn; `State::chunk_scratch` between commands).
    scratch: Cell<Vec<u8>>,
    owner: Cell<Chunked>,
    /// Chunks the command's writes left past the split size.
    oversized: Cell<u32>,
    /// A write emptied a chunk: the key goes if that was its last field.
    emptied: Cell<bool>,
    /// A chunk was written: the owner is written again too, for a new CAS (what WATCH and
    /// memcached's `gets` compare: a large hash changes as a whole).
    changed: Cell<bool>,
    /// A chunk the command met is broken (`ChunkDoor::broken`): the reply is
    /// [`ERR_DAMAGED`].
    broken: Cell<bool>,
}

impl Large<'_> {
    /// Runs `argv` (a hash command on this hash's key) on chunk `chunk`, appending its reply.
    fn on_chunk(
        &self,
        state: &mut State,
        call: &Call<'_>,
        chunk: u32,
        argv: &[&[u8]],
        out: &mut Vec<u8>,
    ) {
        let mut input =
            Vec::with_capacity(16 + argv.iter().map(|arg| arg.len() + 16).sum::<usize>());
        encode::array_len(&mut input, argv.len());
        for arg in argv {
            encode::bulk(&mut input, arg);
        }
        let mut args = Args::new();
        let parsed = parse_command(&input, &Limits::default(), &mut args);
        debug_assert!(parsed.is_ok(), "a command built whole");
        let Some(command) = table::lookup(argv[0]) else {
            encode::error(out, b"ERR unknown hash command");
            return;
        };
        self.run_on_chunk(state, call, chunk, (&input, &args, command), out);
    }

    /// Runs `command` (its arguments `args` over `input`: a share of `call`, or `call`
    /// itself) on chunk `chunk`, and notes what it changed.
    fn run_on_chunk(
        &self,
        state: &mut State,
        call: &Call<'_>,
        chunk: u32,
        (input, args, command): (&[u8], &Args, &'static table::Command),
        out: &mut Vec<u8>,
    ) {
        let door = ChunkDoor::new(self.families, self.key, self.owner.get(), chunk);
        door.scratch.set(self.scratch.take());
        let sub = Call {
            ctx: call.ctx,
            input,
            args,
            command,
            keys: call.keys().held_by(&door),
            in_chunk: true,
            wants_held: Cell::new(false),
            key_found: call.key_found,
        };
        (command.run)(state, &sub, out);
        self.scratch.set(door.scratch.take());
        self.changed
            .set(self.changed.get() || door.written_len.get().is_some());
        self.broken.set(self.broken.get() || door.broken.get());
        let (count_delta, expiring_delta) = door.counts_delta.get();
        let latest = door.latest_expiry_after.get();
        self.owner.set(
            self.owner
                .get()
                .counted(count_delta, expiring_delta, latest),
        );
        // A chunk of one field gains nothing from splits (a field past the split size).
        let several = door.counts_after.get() > 1;
        match door.written_len.get() {
            Some(0) => self.emptied.set(true),
            Some(len) if len > CHUNK_SPLIT_BYTES && several => {
                self.oversized.set(self.oversized.get() + 1);
            }
            _ => {}
        }
    }

    /// The command as it came, on chunk `chunk`: run on its own parsed arguments, so nothing
    /// is built, parsed or looked up again.
    fn on_chunk_whole(
        &self,
        state: &mut State,
        call: &Call<'_>,
        chunk: u32,
        out: &mut Vec<u8>,
    ) -> Result<(), WriteError> {
        debug_assert_eq!(call.arg(1), self.key, "a hash command's key comes first");
        self.run_on_chunk(
            state,
            call,
            chunk,
            (call.input, call.args, call.command),
            out,
        );
        Ok(())
    }

    /// A command on one field (argument 2): on that field's chunk.
    fn on_field(
        &self,
        state: &mut State,
        call: &Call<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), WriteError> {
        let chunk = self.owner.get().chunk_of(call.arg(2));
        self.on_chunk_whole(state, call, chunk, out)
    }

    /// HSET, HMSET (field, value pairs: `step` 2) and HDEL (fields: 1): each chunk's share on
    /// it, the integer replies added, or `+OK` when `replies_ok` (HMSET).
    fn by_chunk(
        &self,
        state: &mut State,
        call: &Call<'_>,
        (step, replies_ok): (usize, bool),
        out: &mut Vec<u8>,
    ) -> Result<(), WriteError> {
        if !(call.len() - 2).is_multiple_of(step) {
            return self.on_chunk_whole(state, call, 0, out); // Its own arity error.
        }
        let owner = self.owner.get();
        // All on one chunk (always so for one field): the command as it came, whose reply
        // is the sum's.
        let first = owner.chunk_of(call.arg(2));
        if (2 + step..call.len())
            .step_by(step)
            .all(|at| owner.chunk_of(call.arg(at)) == first)
        {
            return self.on_chunk_whole(state, call, first, out);
        }
        let mut groups: Vec<(u32, Vec<&[u8]>)> = Vec::with_capacity(2);
        for at in (2..call.len()).step_by(step) {
            let chunk = owner.chunk_of(call.arg(at));
            let group = match groups.iter().position(|(c, _)| *c == chunk) {
                Some(group) => group,
                None => {
                    let mut argv = Vec::with_capacity(2 + step);
                    argv.extend_from_slice(&[call.arg(0), self.key]);
                    groups.push((chunk, argv));
                    groups.len() - 1
                }
            };
            groups[group].1.extend(call.args_from(at).take(step));
        }
        let mut total = 0i64;
        for (chunk, argv) in &groups {
            if self.broken.get() {
                return Ok(()); // No chunk past a broken one is written (`run` answers).
            }
            let mut reply = Vec::new();
            self.on_chunk(state, call, *chunk, argv, &mut reply);
            match reply.first() {
                Some(b':') => total += parse_integer_reply(&reply),
                Some(b'+') => {}
                _ => {
                    out.extend_from_slice(&reply);
                    return Ok(());
                }
            }
        }
        if replies_ok {
            encode::ok(out);
        } else {
            encode::integer(out, total);
        }
        Ok(())
    }

    /// HMGET and the field-expiry commands: each field from `first` on, on its own chunk,
    /// one element each of one array.
    fn each_field(
        &self,
        state: &mut State,
        call: &Call<'_>,
        first: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), WriteError> {
        let owner = self.owner.get();
        let fixed: Vec<&[u8]> = call.args_from(0).take(first).collect();
        let counted = first > 2; // A field-expiry command: `FIELDS 1` before the field.
        let mut elements = Vec::new();
        let fields = call.len() - first;
        for name in call.args_from(first) {
            if self.broken.get() {
                return Ok(()); // No chunk past a broken one is read or written (`run` answers).
            }
            let mut argv = fixed.clone();
            if counted {
                argv[first - 1] = b"1";
            }
            argv.push(name);
            let mut reply = Vec::new();
            self.on_chunk(state, call, owner.chunk_of(name), &argv, &mut reply);
            if reply.first() != Some(&b'*') {
                out.extend_from_slice(&reply);
                return Ok(());
            }
            elements.extend_from_slice(after_header(&reply));
        }
        encode::array_len(out, fields);
        out.extend_from_slice(&elements);
        Ok(())
    }

    /// The chunk's live field count, or `Err` for a damaged chunk.
    fn chunk_len(&self, chunk: u32, now_ms: u64) -> Result<usize, ()> {
        let door = ChunkDoor::new(self.families, self.key, self.owner.get(), chunk);
        let len = door.with_chunk(|bytes| match bytes {
            None => Ok(0),
            Some(bytes) => {
                let hash = Hash::open(bytes).map_err(|_| ())?;
                if hash.has_expiring() {
                    Ok(Hash::parse(bytes).map_err(|_| ())?.len(now_ms))
                } else {
                    Ok(hash.len(now_ms))
                }
            }
        });
        if door.broken.get() {
            return Err(());
        }
        len
    }

    /// HLEN: the owner's count where no field has an expiry (O(1), as in Redis), else the
    /// chunks' live counts added.
    fn len(&self, call: &Call<'_>, out: &mut Vec<u8>) -> Result<(), WriteError> {
        let owner = self.owner.get();
        if owner.expiring() == 0 {
            encode::integer(out, i64::from(owner.count()));
            return Ok(());
        }
        let now_ms = call.engine().now_ms();
        let mut total = 0usize;
        for chunk in 0..self.owner.get().chunks() {
            match self.chunk_len(chunk, now_ms) {
                Ok(len) => total += len,
                Err(()) => {
                    out.extend_from_slice(ERR_DAMAGED);
                    return Ok(());
                }
            }
        }
        encode::integer(out, i64::try_from(total).unwrap_or(i64::MAX));
        Ok(())
    }

    /// HGETALL, HKEYS, HVALS: the command on every chunk, the replies joined.
    fn every_chunk(
        &self,
        state: &mut State,
        call: &Call<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), WriteError> {
        let mut joined = Joined::default();
        for chunk in 0..self.owner.get().chunks() {
            let mut reply = Vec::new();
            self.on_chunk_whole(state, call, chunk, &mut reply)?;
            if !joined.add(&reply) {
                out.extend_from_slice(&reply);
                return Ok(());
            }
        }
        joined.write(out);
        Ok(())
    }

    /// HSCAN with a cursor that is a chunk number: whole chunks from it, until COUNT fields
    /// (10 by default) are in the reply; the next cursor is the next chunk, 0 after the last.
    /// A split moves fields only to a chunk numbered past every chunk there was, so a scan
    /// misses no field that was there throughout (it may return one twice, as Redis may).
    fn scan(
        &self,
        state: &mut State,
        call: &Call<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), WriteError> {
        let Some(mut chunk) = std::str::from_utf8(call.arg(2))
            .ok()
            .and_then(|cursor| cursor.parse::<u32>().ok())
        else {
            return self.on_chunk_whole(state, call, 0, out); // Its own cursor error.
        };
        let count = (3..call.len())
            .find(|&at| name_eq(call.arg(at), b"count"))
            .and_then(|at| call.args_from(at + 1).next())
            .and_then(parse_i64)
            .map_or(10, |count| usize::try_from(count.max(1)).unwrap_or(10));
        let mut argv: Vec<&[u8]> = call.args_from(0).collect();
        argv[2] = b"0";
        let mut joined = Joined::default();
        while chunk < self.owner.get().chunks() && joined.elements < count {
            let mut reply = Vec::new();
            self.on_chunk(state, call, chunk, &argv, &mut reply);
            let Some(fields) = scan_fields(&reply) else {
                out.extend_from_slice(&reply);
                return Ok(());
            };
            joined.add(fields);
            chunk += 1;
        }
        let next = if chunk >= self.owner.get().chunks() {
            0
        } else {
            chunk
        };
        encode::array_len(out, 2);
        encode::bulk(out, next.to_string().as_bytes());
        joined.write(out);
        Ok(())
    }

    /// HRANDFIELD: without a count, a field of the first chunk that has one from a random
    /// chunk on; with a negative count, that many fields, each of a random chunk that has one
    /// (repeats allowed); with a positive one, distinct fields chunk after chunk from a random
    /// one (chunks hold distinct fields). Each walks only as far as it needs.
    fn random(
        &self,
        state: &mut State,
        call: &Call<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), WriteError> {
        let chunks = self.owner.get().chunks();
        let start = (super::hashes::random_u64(state) % u64::from(chunks)) as u32;
        let count = (call.len() > 2).then(|| parse_i64(call.arg(2))).flatten();
        let Some(count) = count.filter(|&count| count != 0) else {
            // One field (or the command's own reply for a count of 0 or a bad one).
            let mut reply = Vec::new();
            for at in 0..chunks {
                reply.clear();
                self.on_chunk_whole(state, call, (start + at) % chunks, &mut reply)?;
                if !is_empty_reply(&reply) {
                    break;
                }
            }
            out.extend_from_slice(&reply);
            return Ok(());
        };
        let argv: Vec<&[u8]> = call.args_from(0).collect();
        let with_values = argv.len() > 3 && state.version == Version::Resp2;
        let per_field = if with_values { 2 } else { 1 };
        let mut joined = Joined::default();
        let mut wanted = count.unsigned_abs();
        // Chunk tries left: a negative count's pick of an empty chunk tries again, but a
        // hash whose chunks are all empty ends the walk.
        let mut tries = u64::from(chunks).saturating_add(wanted.saturating_mul(4));
        let mut next = start;
        while wanted > 0 && tries > 0 {
            tries -= 1;
            let chunk = if count < 0 {
                (super::hashes::random_u64(state) % u64::from(chunks)) as u32
            } else {
                let chunk = next;
                next = (next + 1) % chunks;
                chunk
            };
            let ask = if count < 0 {
                b"-1".to_vec()
            } else {
                wanted.to_string().into_bytes()
            };
            let mut asked = argv.clone();
            asked[2] = &ask;
            let mut reply = Vec::new();
            self.on_chunk(state, call, chunk, &asked, &mut reply);
            let before = joined.elements;
            if !joined.add(&reply) {
                out.extend_from_slice(&reply);
                return Ok(());
            }
            wanted = wanted.saturating_sub(((joined.elements - before) / per_field) as u64);
            if count > 0 && next == start {
                break; // Every chunk gave what it had.
            }
        }
        joined.write(out);
        Ok(())
    }

    /// After the command's writes: the splits its oversized chunks call for, and the key's
    /// removal when an emptied chunk was its last field.
    fn settle(&self, call: &Call<'_>) -> Result<(), WriteError> {
        if self.changed.get() {
            let owner = self.owner.get();
            let mut encoded = self.scratch.take();
            encoded.clear();
            owner.encode(&mut encoded);
            let chunks = owner.chunks();
            // The key goes at its own expiry, or with its fields if every one expires.
            let expiry = owner.record_expiry_ms().map_or(Expiry::Never, Expiry::AtMs);
            let written =
                (self.families).write_owner(self.key, &encoded, Kind::Hash, expiry, chunks);
            self.scratch.set(encoded);
            if written?.is_none() {
                return Ok(()); // Evicted as it was written.
            }
        }
        for _ in 0..self.oversized.get() {
            // No more chunks than fields: past that, splits only make empty chunks.
            if self.owner.get().chunks() >= self.owner.get().count() {
                break;
            }
            self.split()?;
            if self.broken.get() {
                return Ok(()); // A chunk the split would read is broken.
            }
        }
        if self.emptied.get() && self.owner.get().count() == 0 {
            call.keys().delete(self.key, None)?;
        }
        Ok(())
    }

    /// Splits the chunk at the split pointer (types' module docs): the new chunk, then the
    /// owner, then the old chunk without the fields that left it, each durable before the
    /// next.
    fn split(&self) -> Result<(), WriteError> {
        let owner = self.owner.get();
        if !owner.can_split() {
            return Ok(());
        }
        let (from, to, next) = owner.split_next();
        let door = ChunkDoor::new(self.families, self.key, owner, from);
        let bytes = door.load();
        if door.broken.get() {
            self.broken.set(true);
            return Ok(()); // Left as it is: dropped whole at the engine's next repair.
        }
        let hash = match bytes.as_deref().map(Hash::parse) {
            Some(Err(_)) => return Ok(()), // Damaged: left as it is.
            other => other.map(Result::unwrap),
        };
        let (mut stay, mut moved) = (Vec::new(), Vec::new());
        {
            let (mut stays, mut moves) = (Builder::new(&mut stay), Builder::new(&mut moved));
            for field in hash.iter().flat_map(Hash::stored) {
                if next.chunk_of(field.name) == to {
                    moves.push(field);
                } else {
                    stays.push(field);
                }
            }
            if stays.finish(chunk_tag(next.bits_of(from))) == 0 {
                stay.clear();
            }
            if moves.finish(chunk_tag(next.bits_of(to))) == 0 {
                moved.clear();
            }
        }
        self.families.write_part(self.key, to, &moved)?;
        self.families.make_durable(self.key)?;
        let mut encoded = Vec::new();
        next.encode(&mut encoded);
        let kept = self.families.write_owner(
            self.key,
            &encoded,
            Kind::Hash,
            Expiry::Keep,
            next.chunks(),
        )?;
        if kept.is_none() {
            return Ok(()); // Evicted as it was written: the hash is gone.
        }
        self.families.make_durable(self.key)?;
        self.families.write_part(self.key, from, &stay)?;
        self.owner.set(next);
        Ok(())
    }
}

/// Makes a hash whose compact encoding `compact` outgrew the compact form chunked: its fields
/// spread over the chunks, written and made durable first, then the owner (a crash between
/// leaves the compact hash and orphans the cleaner drops).
pub(crate) fn make_chunked(
    families: &dyn Families,
    key: &[u8],
    compact: &[u8],
    key_expiry_ms: Option<u64>,
) -> Result<(), WriteError> {
    use std::hash::BuildHasher;
    let hash = Hash::parse(compact).map_err(|_| WriteError::WrongKind)?;
    let seed = std::collections::hash_map::RandomState::new().hash_one(key);
    let stored = i64::try_from(hash.stored_len()).unwrap_or(i64::MAX);
    let expiring = i64::try_from(hash.expiring_len()).unwrap_or(i64::MAX);
    let owner = Chunked::for_bytes(compact.len(), key_expiry_ms, seed).counted(
        stored,
        expiring,
        hash.latest_expiry_ms(),
    );
    let mut chunks: Vec<Vec<strata_types::hash::Field<'_>>> =
        vec![Vec::new(); owner.chunks() as usize];
    for field in hash.stored() {
        chunks[owner.chunk_of(field.name) as usize].push(field);
    }
    let mut bytes = Vec::new();
    for (chunk, fields) in chunks.iter().enumerate() {
        bytes.clear();
        let mut builder = Builder::new(&mut bytes);
        for field in fields {
            builder.push(*field);
        }
        if builder.finish(chunk_tag(owner.bits_of(chunk as u32))) == 0 {
            bytes.clear();
        }
        families.write_part(key, chunk as u32, &bytes)?;
    }
    families.make_durable(key)?;
    let mut encoded = Vec::new();
    owner.encode(&mut encoded);
    let expiry = owner.record_expiry_ms().map_or(Expiry::Never, Expiry::AtMs);
    families.write_owner(key, &encoded, Kind::Hash, expiry, owner.chunks())?;
    Ok(())
}

/// Whether a chunk's HRANDFIELD reply found nothing: a nil (RESP2 `$-1`, RESP3 `_`) or an
/// empty array.
fn is_empty_reply(reply: &[u8]) -> bool {
    reply.starts_with(b"$-1") || reply.starts_with(b"_") || reply.starts_with(b"*0\r")
}

/// The integer of a `:n` reply.
fn parse_integer_reply(reply: &[u8]) -> i64 {
    let end = reply
        .iter()
        .position(|&b| b == b'\r')
        .unwrap_or(reply.len());
    parse_i64(&reply[1..end]).unwrap_or(0)
}

/// What follows an aggregate reply's header line.
fn after_header(reply: &[u8]) -> &[u8] {
    let end = reply
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(reply.len(), |at| at + 2);
    &reply[end..]
}

/// An aggregate reply's header: its type byte and element count.
fn header_of(reply: &[u8]) -> Option<(u8, usize)> {
    let first = *reply.first()?;
    if first != b'*' && first != b'%' {
        return None;
    }
    let end = reply.windows(2).position(|w| w == b"\r\n")?;
    let count = std::str::from_utf8(&reply[1..end]).ok()?.parse().ok()?;
    Some((first, count))
}

/// The field array of an HSCAN reply (`*2`, the cursor's two lines, then the array).
fn scan_fields(reply: &[u8]) -> Option<&[u8]> {
    let (b'*', 2) = header_of(reply)? else {
        return None;
    };
    let fields = after_header(after_header(after_header(reply)));
    header_of(fields).map(|_| fields)
}

/// Aggregate replies of the chunks, joined into one.
#[derive(Default)]
struct Joined {
    kind: Option<u8>,
    elements: usize,
    body: Vec<u8>,
}

impl Joined {
    /// Adds a chunk's reply; `false` when it is not an aggregate (an error: the answer).
    fn add(&mut self, reply: &[u8]) -> bool {
        let Some((kind, count)) = header_of(reply) else {
            return false;
        };
        self.kind.get_or_insert(kind);
        self.elements += count;
        self.body.extend_from_slice(after_header(reply));
        true
    }

    fn write(&self, out: &mut Vec<u8>) {
        let kind = self.kind.unwrap_or(b'*');
        out.push(kind);
        out.extend_from_slice(self.elements.to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
    }
}
