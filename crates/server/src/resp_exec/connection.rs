//! Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, CLIENT, TIME, SHUTDOWN.
//!
//! strata has one user (`default`) and one database (0). Departures from Redis 7.0.15:
//! `SELECT n` for n > 0 answers `-ERR DB index is out of range` (Redis has 16 databases);
//! `CLIENT LIST` shows every Redis client of every worker (`crate::clients`) with zeros for the
//! buffer figures strata does not keep per client, and `CLIENT KILL` closes them (their workers
//! do, at once); `CLIENT SETINFO` is accepted as Redis 7.2 does, since current client libraries
//! send it.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use strata_protocol::resp::{encode, errors, name_eq, parse_i64, Version};

use super::{Call, State, CLIENT_NAME_LEN_MAX, REDIS_VERSION_COMPATIBLE};
use crate::clients::{BufferFigures, Client};

/// `PING [message]`: `+PONG`, or the message as a bulk string.
pub(crate) fn ping(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    match call.len() {
        1 => encode::simple(out, b"PONG"),
        2 => encode::bulk(out, call.arg(1)),
        _ => errors::wrong_args(out, b"ping"),
    };
}

/// `ECHO message`.
pub(crate) fn echo(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    encode::bulk(out, call.arg(1));
}

/// `QUIT`: `+OK`, then the connection closes (Redis 7.0 ignores extra arguments).
pub(crate) fn quit(state: &mut State, _: &Call<'_>, out: &mut Vec<u8>) {
    encode::ok(out);
    state.close = true;
}

/// `RESET`: back to RESP2, no name, replies on, reads touching again, unauthenticated when a
/// password is set.
pub(crate) fn reset(state: &mut State, _: &Call<'_>, out: &mut Vec<u8>) {
    state.version = Version::Resp2;
    state.name = None;
    state.authenticated = false;
    state.reply_off = false;
    state.reply_skip_next = false;
    state.no_touch = false;
    state.multi = None;
    state.watched.clear();
    if let Some(sink) = state.monitor.take() {
        sink.close();
    }
    encode::simple(out, b"RESET");
}

/// `MONITOR`: from now on the connection also receives every command any Redis client runs
/// (see `crate::monitor`); RESET or the close ends it. Again while monitoring: nothing more.
pub(crate) fn monitor(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    if state.monitor.is_none() {
        if let Some(client) = &state.client {
            state.monitor = Some(call.ctx.monitors.attach(std::sync::Arc::clone(client)));
        }
    }
    encode::ok(out);
}

/// `SELECT index`: only database 0 exists.
pub(crate) fn select(_: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    match parse_i64(call.arg(1)).map(i32::try_from) {
        None => out.extend_from_slice(errors::ERR_NOT_INTEGER),
        // Redis's getIntFromObjectOrReply wording, typo included.
        Some(Err(_)) => {
            encode::error(
                out,
                b"ERR value is out of range, value must between -2147483648 and 2147483647",
            );
        }
        Some(Ok(0)) => {
            encode::ok(out);
        }
        Some(Ok(_)) => out.extend_from_slice(errors::ERR_DB_INDEX),
    }
}

/// `TIME`: Unix seconds and microseconds, as two bulk strings.
pub(crate) fn time(_: &mut State, _: &Call<'_>, out: &mut Vec<u8>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    encode::array_len(out, 2);
    encode::bulk(out, now.as_secs().to_string().as_bytes());
    encode::bulk(out, now.subsec_micros().to_string().as_bytes());
}

/// `SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]`: sets the server's shutdown flag and closes
/// the connection without a reply, as Redis does when it exits. strata has no RDB, so SAVE and
/// NOSAVE mean the same; the pool is persisted by the server's orderly shutdown.
pub(crate) fn shutdown(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (mut save, mut nosave, mut other, mut abort) = (false, false, false, false);
    for option in call.args_from(1) {
        if name_eq(option, b"nosave") {
            nosave = true;
        } else if name_eq(option, b"save") {
            save = true;
        } else if name_eq(option, b"now") || name_eq(option, b"force") {
            other = true;
        } else if name_eq(option, b"abort") {
            abort = true;
        } else {
            out.extend_from_slice(errors::ERR_SYNTAX);
            return;
        }
    }
    if (abort && (save || nosave || other)) || (save && nosave) {
        out.extend_from_slice(errors::ERR_SYNTAX);
        return;
    }
    if abort {
        encode::error(out, b"ERR No shutdown in progress.");
        return;
    }
    // Release: pairs with the Acquire load in the server's event loops.
    if !call.ctx.shutdown.swap(true, Ordering::AcqRel) {
        crate::notify::stopping();
    }
    state.close = true;
}

/// Checks a password for `user` against `requirepass`, in constant time for the lengths. With no
/// password configured, the default user accepts any password (Redis's `nopass`); other users
/// never exist.
fn password_ok(call: &Call<'_>, user: &[u8], password: &[u8]) -> bool {
    if user != b"default" {
        return false;
    }
    match &call.ctx.settings.requirepass {
        None => true,
        Some(required) => crate::auth::constant_time_eq(password, required.as_bytes()),
    }
}

/// `AUTH [user] password`.
pub(crate) fn auth(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (user, password) = match call.len() {
        2 if call.ctx.settings.requirepass.is_none() => {
            out.extend_from_slice(errors::ERR_AUTH_NOT_CONFIGURED);
            return;
        }
        2 => (&b"default"[..], call.arg(1)),
        3 => (call.arg(1), call.arg(2)),
        _ => {
            out.extend_from_slice(errors::ERR_SYNTAX);
            return;
        }
    };
    if password_ok(call, user, password) {
        state.authenticated = true;
        encode::ok(out);
    } else {
        out.extend_from_slice(errors::ERR_WRONGPASS);
    }
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: switches protocol and answers with the
/// server map Redis 7.0 gives.
pub(crate) fn hello(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let mut version = None;
    if call.len() >= 2 {
        match parse_i64(call.arg(1)) {
            None => {
                encode::error(
                    out,
                    b"ERR Protocol version is not an integer or out of range",
                );
                return;
            }
            Some(2) => version = Some(Version::Resp2),
            Some(3) => version = Some(Version::Resp3),
            Some(_) => {
                out.extend_from_slice(errors::ERR_NOPROTO);
                return;
            }
        }
    }
    let Some((credentials, name)) = hello_options(call, out) else {
        return;
    };
    if let Some((user, password)) = credentials {
        if !password_ok(call, user, password) {
            out.extend_from_slice(errors::ERR_WRONGPASS);
            return;
        }
        state.authenticated = true;
    }
    if !state.authenticated && call.ctx.settings.requirepass.is_some() {
        encode::error(
            out,
            b"NOAUTH HELLO must be called with the client already authenticated, otherwise the \
HELLO AUTH <user> <pass> option can be used to authenticate the client and select the \
RESP protocol version at the same time",
        );
        return;
    }
    if let Some(name) = name {
        if !set_name(state, name, out) {
            return;
        }
    }
    if let Some(version) = version {
        state.version = version;
    }
    hello_reply(state, out);
}

/// Credentials and client name of a HELLO, or `None` after replying with a syntax error.
type HelloOptions<'a> = (Option<(&'a [u8], &'a [u8])>, Option<&'a [u8]>);

fn hello_options<'a>(call: &Call<'a>, out: &mut Vec<u8>) -> Option<HelloOptions<'a>> {
    let (mut credentials, mut name) = (None, None);
    let mut index = 2;
    while index < call.len() {
        let option = call.arg(index);
        let more = call.len() - 1 - index;
        if name_eq(option, b"auth") && more >= 2 {
            credentials = Some((call.arg(index + 1), call.arg(index + 2)));
            index += 3;
        } else if name_eq(option, b"setname") && more >= 1 {
            name = Some(call.arg(index + 1));
            index += 2;
        } else {
            let mut message = b"ERR Syntax error in HELLO option '".to_vec();
            message.extend_from_slice(option);
            message.push(b'\'');
            encode::error(out, &message);
            return None;
        }
    }
    Some((credentials, name))
}

fn hello_reply(state: &State, out: &mut Vec<u8>) {
    encode::map_len(out, state.version, 7);
    encode::bulk(out, b"server");
    encode::bulk(out, b"redis");
    encode::bulk(out, b"version");
    encode::bulk(out, REDIS_VERSION_COMPATIBLE.as_bytes());
    encode::bulk(out, b"proto");
    encode::integer(
        out,
        match state.version {
            Version::Resp2 => 2,
            Version::Resp3 => 3,
        },
    );
    encode::bulk(out, b"id");
    encode::integer(out, i64::try_from(state.client_id).unwrap_or(i64::MAX));
    encode::bulk(out, b"mode");
    encode::bulk(out, b"standalone");
    encode::bulk(out, b"role");
    encode::bulk(out, b"master");
    encode::bulk(out, b"modules");
    encode::array_len(out, 0);
}

/// Sets (or with an empty name clears) the client name; replies with Redis's error and returns
/// false when the name has spaces, control bytes, or is too long.
fn set_name(state: &mut State, name: &[u8], out: &mut Vec<u8>) -> bool {
    if name.iter().any(|&byte| !(b'!'..=b'~').contains(&byte)) {
        encode::error(
            out,
            b"ERR Client names cannot contain spaces, newlines or special characters.",
        );
        return false;
    }
    if name.len() > CLIENT_NAME_LEN_MAX {
        encode::error(out, b"ERR Client names are limited to 256 bytes in strata.");
        return false;
    }
    state.name = (!name.is_empty()).then(|| name.to_vec());
    true
}

/// `CLIENT <subcommand> ...`.
pub(crate) fn client(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let sub = call.arg(1);
    let len = call.len();
    let arity = |exact: usize| len == exact;
    if name_eq(sub, b"id") && arity(2) {
        encode::integer(out, i64::try_from(state.client_id).unwrap_or(i64::MAX));
    } else if name_eq(sub, b"getname") && arity(2) {
        match &state.name {
            Some(name) => encode::bulk(out, name),
            None => encode::null(out, state.version),
        };
    } else if name_eq(sub, b"setname") && arity(3) {
        if set_name(state, call.arg(2), out) {
            encode::ok(out);
        }
    } else if name_eq(sub, b"info") && arity(2) {
        let line = client_line(state, "info");
        encode::verbatim(out, state.version, b"txt", line.as_bytes());
    } else if name_eq(sub, b"setinfo") && arity(4) {
        client_setinfo(state, call, out);
    } else if name_eq(sub, b"no-evict") && arity(3) {
        on_off(call.arg(2), out);
    } else if name_eq(sub, b"no-touch") && arity(3) {
        if let Some(on) = on_off(call.arg(2), out) {
            state.no_touch = on;
        }
    } else if name_eq(sub, b"reply") && arity(3) {
        client_reply(state, call.arg(2), out);
    } else if name_eq(sub, b"list") {
        client_list(state, call, out);
    } else if name_eq(sub, b"kill") && len >= 3 {
        client_kill(state, call, out);
    } else if name_eq(sub, b"pause") && (arity(3) || arity(4)) {
        client_pause(call, out);
    } else if name_eq(sub, b"pause") && len > 4 {
        errors::subcommand_syntax(out, b"client", sub);
    } else if name_eq(sub, b"unpause") && arity(2) {
        call.ctx.pause.unpause();
        call.ctx.clients.wake_all();
        encode::ok(out);
    } else {
        client_wrong(sub, out);
    }
}

/// Replies to a CLIENT call that matched no form: wrong arity for a known subcommand, or
/// unknown subcommand.
fn client_wrong(sub: &[u8], out: &mut Vec<u8>) {
    const KNOWN: &[&str] = &[
        "id", "getname", "setname", "info", "list", "setinfo", "no-evict", "no-touch", "reply",
        "kill", "pause", "unpause",
    ];
    match KNOWN.iter().find(|name| name_eq(sub, name.as_bytes())) {
        Some(name) => errors::wrong_args(out, format!("client|{name}").as_bytes()),
        None => errors::unknown_subcommand(out, b"client", sub),
    };
}

/// `CLIENT PAUSE timeout [WRITE|ALL]` (see `crate::pause`).
fn client_pause(call: &Call<'_>, out: &mut Vec<u8>) {
    let held = match call.len() {
        3 => crate::pause::Held::All,
        _ if name_eq(call.arg(3), b"all") => crate::pause::Held::All,
        _ if name_eq(call.arg(3), b"write") => crate::pause::Held::Writes,
        _ => {
            encode::error(out, b"ERR CLIENT PAUSE mode must be WRITE or ALL");
            return;
        }
    };
    match parse_i64(call.arg(2)) {
        None => encode::error(out, b"ERR timeout is not an integer or out of range"),
        Some(ms) if ms < 0 => encode::error(out, b"ERR timeout is negative"),
        Some(ms) => {
            call.ctx.pause.pause(ms.unsigned_abs(), held);
            encode::ok(out)
        }
    };
}

/// `ON` or `OFF` (answered `+OK`), else a syntax error and `None`.
fn on_off(value: &[u8], out: &mut Vec<u8>) -> Option<bool> {
    let on = if name_eq(value, b"on") {
        true
    } else if name_eq(value, b"off") {
        false
    } else {
        out.extend_from_slice(errors::ERR_SYNTAX);
        return None;
    };
    encode::ok(out);
    Some(on)
}

fn client_reply(state: &mut State, mode: &[u8], out: &mut Vec<u8>) {
    if name_eq(mode, b"on") {
        state.reply_off = false;
        encode::ok(out);
    } else if name_eq(mode, b"off") {
        state.reply_off = true;
    } else if name_eq(mode, b"skip") {
        state.reply_skip_next = !state.reply_off;
    } else {
        out.extend_from_slice(errors::ERR_SYNTAX);
    }
}

/// `CLIENT SETINFO LIB-NAME|LIB-VER value` (Redis 7.2).
fn client_setinfo(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (attribute, value) = (call.arg(2), call.arg(3));
    let valid = value.len() <= CLIENT_NAME_LEN_MAX
        && value.iter().all(|&byte| (b'!'..=b'~').contains(&byte));
    if !valid {
        let mut message = b"ERR ".to_vec();
        message.extend_from_slice(attribute);
        message.extend_from_slice(b" cannot contain spaces, newlines or special characters.");
        encode::error(out, &message);
        return;
    }
    let value = (!value.is_empty()).then(|| value.to_vec());
    if name_eq(attribute, b"lib-name") {
        state.lib_name = value;
    } else if name_eq(attribute, b"lib-ver") {
        state.lib_ver = value;
    } else {
        let mut message = b"ERR Unrecognized option '".to_vec();
        message.extend_from_slice(attribute);
        message.push(b'\'');
        encode::error(out, &message);
        return;
    }
    encode::ok(out);
}

/// The `CLIENT INFO` / `CLIENT LIST` line of this connection, in Redis 7.2's field order.
fn client_line(state: &State, command: &str) -> String {
    let text = |bytes: &Option<Vec<u8>>| {
        bytes
            .as_deref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let resp = match state.version {
        Version::Resp2 => 2,
        Version::Resp3 => 3,
    };
    let multi = state.multi.as_ref().map(super::multi::Multi::queued);
    line(&Line {
        id: state.client_id,
        addresses: (state.peer, state.local),
        name: &text(&state.name),
        age_secs: state.created.elapsed().as_secs(),
        idle_secs: 0,
        multi: multi.map_or(-1, |queued| i64::try_from(queued).unwrap_or(i64::MAX)),
        cmd: &format!("client|{command}"),
        resp,
        lib: (&text(&state.lib_name), &text(&state.lib_ver)),
        memcache: false,
        no_touch: state.no_touch,
        buffers: state
            .client
            .as_ref()
            .map(|client| client.buffers.load())
            .unwrap_or_default(),
    })
}

/// One line of `CLIENT LIST` / `CLIENT INFO`.
struct Line<'a> {
    id: u64,
    addresses: (Option<SocketAddr>, Option<SocketAddr>),
    name: &'a str,
    age_secs: u64,
    idle_secs: u64,
    /// Commands queued after MULTI; -1 outside a transaction.
    multi: i64,
    cmd: &'a str,
    resp: u8,
    lib: (&'a str, &'a str),
    /// A memcached connection: `resp=0` and a trailing `proto=memcache`.
    memcache: bool,
    /// `CLIENT NO-TOUCH ON`.
    no_touch: bool,
    /// Its connection's buffers (see [`buffer_fields`]).
    buffers: BufferFigures,
}

/// Redis's buffer fields of a client line, from strata's two buffers per connection. Input:
/// `qbuf` is what was read and not yet run, `qbuf-free` the rest of the read buffer. Output:
/// the first 16 KiB of the write buffer play Redis's fixed reply buffer (`rbs` its size,
/// `obl` the bytes in it) and the rest its reply list, counted in Redis's 16 KiB blocks
/// (`oll`); `omem` is the memory the buffer holds past those 16 KiB, what
/// `--client-output-memory` counts. `tot-mem` is both buffers. strata keeps no figure for
/// `argv-mem`, `multi-mem` and `rbp`: 0.
fn buffer_fields(buffers: &BufferFigures) -> String {
    let base = crate::context::OUTPUT_BUFFER_BYTES_BASE as u64;
    let input_free = buffers
        .input_capacity_bytes
        .saturating_sub(buffers.input_bytes);
    let beyond = buffers.output_bytes.saturating_sub(base);
    format!(
        "qbuf={} qbuf-free={input_free} argv-mem=0 multi-mem=0 rbs={} rbp=0 obl={} oll={} \
         omem={} tot-mem={}",
        buffers.input_bytes,
        buffers.output_capacity_bytes.min(base),
        buffers.output_bytes.min(base),
        beyond.div_ceil(base),
        buffers.output_memory_bytes(),
        buffers.input_capacity_bytes + buffers.output_capacity_bytes,
    )
}

/// Redis's client line: the fields it has, strata's where it keeps them (the buffers' as
/// [`buffer_fields`] says); `fd` is -1 (strata's sockets are the worker's).
fn line(line: &Line<'_>) -> String {
    let address = |a: Option<SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    // In Redis 7.2's order: `x` (in MULTI) before `T` (no-touch); `N` for none.
    let flags = match (line.multi >= 0, line.no_touch) {
        (false, false) => "N",
        (true, false) => "x",
        (false, true) => "T",
        (true, true) => "xT",
    };
    format!(
        "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={flags} db=0 sub=0 psub=0 \
         ssub=0 multi={} {} events=r cmd={} user=default redir=-1 resp={} lib-name={} \
         lib-ver={}{}\n",
        line.id,
        address(line.addresses.0),
        address(line.addresses.1),
        line.name,
        line.age_secs,
        line.idle_secs,
        line.multi,
        buffer_fields(&line.buffers),
        line.cmd,
        line.resp,
        line.lib.0,
        line.lib.1,
        if line.memcache { " proto=memcache" } else { "" },
    )
}

/// The line of another client, from what the registry holds of it.
fn other_line(client: &Client, now_ms: u64) -> String {
    let info = client.info();
    let text = |bytes: &Option<Vec<u8>>| {
        bytes
            .as_deref()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let cmd = match client.last_command.load(Ordering::Relaxed) {
        0 => "NULL",
        row => super::table::COMMANDS
            .get(row - 1)
            .map_or("NULL", |c| c.name),
    };
    line(&Line {
        id: client.id,
        addresses: (client.peer, client.local),
        name: &text(&info.name),
        age_secs: client.created.elapsed().as_secs(),
        idle_secs: client.idle_secs(now_ms),
        multi: client.multi.load(Ordering::Relaxed),
        cmd,
        resp: if client.memcache { 0 } else { info.resp },
        lib: (&text(&info.lib_name), &text(&info.lib_ver)),
        memcache: client.memcache,
        no_touch: info.no_touch,
        buffers: client.buffers.load(),
    })
}

/// Client types of `CLIENT LIST TYPE` and `CLIENT KILL TYPE`: strata's are all `normal`.
fn client_type(name: &[u8], out: &mut Vec<u8>) -> Option<bool> {
    if name_eq(name, b"normal") {
        Some(true)
    } else if ["master", "replica", "slave", "pubsub"]
        .iter()
        .any(|t| name_eq(name, t.as_bytes()))
    {
        Some(false)
    } else {
        let message = format!(
            "ERR Unknown client type '{}'",
            String::from_utf8_lossy(name)
        );
        encode::error(out, message.as_bytes());
        None
    }
}

/// `CLIENT LIST [TYPE type] [ID id ...]`: every Redis client of the server, by id.
fn client_list(state: &State, call: &Call<'_>, out: &mut Vec<u8>) {
    let (mut wanted_type, mut ids): (bool, Option<Vec<u64>>) = (true, None);
    let len = call.len();
    if len == 4 && name_eq(call.arg(2), b"type") {
        let Some(normal) = client_type(call.arg(3), out) else {
            return;
        };
        wanted_type = normal;
    } else if len >= 4 && name_eq(call.arg(2), b"id") {
        let mut list = Vec::new();
        for arg in call.args_from(3) {
            match parse_i64(arg)
                .and_then(|id| u64::try_from(id).ok())
                .filter(|&id| id > 0)
            {
                Some(id) => list.push(id),
                None => {
                    encode::error(out, b"ERR Invalid client ID");
                    return;
                }
            }
        }
        ids = Some(list);
    } else if len != 2 {
        out.extend_from_slice(errors::ERR_SYNTAX);
        return;
    }
    let listed = |id: u64| wanted_type && ids.as_ref().is_none_or(|ids| ids.contains(&id));
    let mut clients = call.ctx.clients.all();
    if !clients.iter().any(|c| c.id == state.client_id) {
        clients.clear(); // A session with no registry entry (tests): itself only.
    }
    let now_ms = call.ctx.clients.coarse_ms();
    let mut text = String::new();
    if clients.is_empty() && listed(state.client_id) {
        text.push_str(&client_line(state, "list"));
    }
    for client in clients.iter().filter(|c| listed(c.id)) {
        if client.id == state.client_id {
            text.push_str(&client_line(state, "list"));
        } else {
            text.push_str(&other_line(client, now_ms));
        }
    }
    encode::verbatim(out, state.version, b"txt", text.as_bytes());
}

/// What `CLIENT KILL`'s filters select.
#[derive(Default)]
struct KillFilter<'a> {
    id: Option<u64>,
    addr: Option<&'a [u8]>,
    laddr: Option<&'a [u8]>,
    /// False for a type strata has none of (master, replica, pubsub).
    any_type: bool,
    skip_me: bool,
}

/// `CLIENT KILL addr:port` (answers `+OK`) or `CLIENT KILL <filter value> ...` (answers how
/// many were killed). The others' workers close them at once (`crate::clients`); the caller
/// itself, when it matches a filter with `SKIPME no`, after this reply.
fn client_kill(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    let address = |a: Option<SocketAddr>| a.map(|a| a.to_string()).unwrap_or_default();
    if call.len() == 3 {
        let target = call.arg(2);
        let found = call
            .ctx
            .clients
            .all()
            .into_iter()
            .find(|c| address(c.peer).as_bytes() == target);
        match found {
            None => encode::error(out, b"ERR No such client"),
            Some(client) => {
                kill(state, call, &client);
                encode::ok(out)
            }
        };
        return;
    }
    let Some(filter) = kill_filter(call, out) else {
        return;
    };
    let me = state.client_id;
    let matches = |c: &Client| {
        filter.any_type
            && filter.id.is_none_or(|id| c.id == id)
            && filter.addr.is_none_or(|a| address(c.peer).as_bytes() == a)
            && filter
                .laddr
                .is_none_or(|a| address(c.local).as_bytes() == a)
            && !(filter.skip_me && c.id == me)
    };
    let mut killed = 0;
    for client in call.ctx.clients.all() {
        if matches(&client) {
            kill(state, call, &client);
            killed += 1;
        }
    }
    encode::integer(out, killed);
}

/// Kills `client`: the caller closes after its reply, another is closed by its worker.
fn kill(state: &mut State, call: &Call<'_>, client: &Client) {
    if client.id == state.client_id {
        state.close = true;
    } else {
        call.ctx.clients.kill(client);
    }
}

/// Parses `CLIENT KILL`'s filter pairs, answering the error of a bad one.
fn kill_filter<'a>(call: &Call<'a>, out: &mut Vec<u8>) -> Option<KillFilter<'a>> {
    if !call.len().is_multiple_of(2) {
        out.extend_from_slice(errors::ERR_SYNTAX);
        return None;
    }
    let mut filter = KillFilter {
        any_type: true,
        skip_me: true,
        ..KillFilter::default()
    };
    for pair in (2..call.len()).step_by(2) {
        let (name, value) = (call.arg(pair), call.arg(pair + 1));
        if name_eq(name, b"id") {
            let id = parse_i64(value).and_then(|id| u64::try_from(id).ok());
            let Some(id) = id.filter(|&id| id > 0) else {
                encode::error(out, b"ERR client-id should be greater than 0");
                return None;
            };
            filter.id = Some(id);
        } else if name_eq(name, b"type") {
            filter.any_type = client_type(value, out)?;
        } else if name_eq(name, b"user") {
            if value != b"default" {
                let message = format!("ERR No such user '{}'", String::from_utf8_lossy(value));
                encode::error(out, message.as_bytes());
                return None;
            }
        } else if name_eq(name, b"addr") {
            filter.addr = Some(value);
        } else if name_eq(name, b"laddr") {
            filter.laddr = Some(value);
        } else if name_eq(name, b"skipme") && (name_eq(value, b"yes") || name_eq(value, b"no")) {
            filter.skip_me = name_eq(value, b"yes");
        } else {
            out.extend_from_slice(errors::ERR_SYNTAX);
            return None;
        }
    }
    Some(filter)
}
