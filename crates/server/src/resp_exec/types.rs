//! Commands strata does not execute.
//!
//! A command named `POST` or `Host:`, or an inline command whose last argument starts with
//! `HTTP/`, is part of an HTTP request sent to the Redis port (cross-protocol scripting): the
//! connection closes at once without a reply, as Redis closes it for `POST` and `Host:`
//! (`strata_protocol::cross_protocol` gives both reference servers' rules).
//!
//! Redis data-type commands strata does not store (lists, sets, sorted sets, streams,
//! HyperLogLog, geo) on a key that exists answer `-WRONGTYPE`, which is true: the key holds a
//! string or a hash. Every other
//! unknown command, including a data-type command on a missing key (Redis would create the
//! value, strata cannot), answers Redis 7.0's `-ERR unknown command '<name>', with args
//! beginning with: ...`, which client libraries already report clearly.

use strata_protocol::cross_protocol;
use strata_protocol::resp::{errors, lowercase_name, Args, COMMAND_NAME_LEN_MAX};

use super::State;
use crate::context::ServerContext;

/// Redis 7.0 commands whose first argument is a key of a type strata does not store.
const DATA_TYPE_COMMANDS: &[&str] = &[
    // Lists.
    "lpush",
    "rpush",
    "lpushx",
    "rpushx",
    "lpop",
    "rpop",
    "llen",
    "lrange",
    "lindex",
    "lset",
    "linsert",
    "lrem",
    "ltrim",
    "lpos",
    "lmove",
    "blmove",
    "rpoplpush",
    "brpoplpush",
    "blpop",
    "brpop",
    "lmpop",
    "blmpop",
    // Sets.
    "sadd",
    "srem",
    "smembers",
    "sismember",
    "smismember",
    "scard",
    "spop",
    "srandmember",
    "smove",
    "sinter",
    "sintercard",
    "sinterstore",
    "sunion",
    "sunionstore",
    "sdiff",
    "sdiffstore",
    "sscan",
    // Sorted sets.
    "zadd",
    "zincrby",
    "zrem",
    "zcard",
    "zcount",
    "zscore",
    "zmscore",
    "zrank",
    "zrevrank",
    "zrange",
    "zrangestore",
    "zrevrange",
    "zrangebyscore",
    "zrevrangebyscore",
    "zrangebylex",
    "zrevrangebylex",
    "zlexcount",
    "zremrangebyrank",
    "zremrangebyscore",
    "zremrangebylex",
    "zpopmin",
    "zpopmax",
    "bzpopmin",
    "bzpopmax",
    "zrandmember",
    "zunion",
    "zunionstore",
    "zinter",
    "zinterstore",
    "zintercard",
    "zdiff",
    "zdiffstore",
    "zscan",
    "zmpop",
    "bzmpop",
    // Streams.
    "xadd",
    "xlen",
    "xrange",
    "xrevrange",
    "xread",
    "xreadgroup",
    "xdel",
    "xtrim",
    "xack",
    "xpending",
    "xclaim",
    "xautoclaim",
    "xinfo",
    "xgroup",
    "xsetid",
    // HyperLogLog and geo.
    "pfadd",
    "pfcount",
    "pfmerge",
    "geoadd",
    "geodist",
    "geohash",
    "geopos",
    "georadius",
    "georadiusbymember",
    "geosearch",
    "geosearchstore",
];

/// Answers a command that is not in the table: a hang-up for an HTTP request, `-WRONGTYPE`
/// for a data-type command on an existing key, else Redis's unknown-command error.
pub(crate) fn unknown(
    state: &mut State,
    ctx: &ServerContext,
    input: &[u8],
    args: &Args,
    out: &mut Vec<u8>,
) {
    let name = args.arg(input, 0);
    // Inline commands are the ones an HTTP client can send: `input` is this command's bytes.
    let inline = input.first() != Some(&b'*');
    let last = if inline {
        args.arg(input, args.len() - 1)
    } else {
        &[]
    };
    if cross_protocol::is_http(name, last) {
        state.close = true;
        state.hang_up = true;
        return;
    }
    if args.len() >= 2 && is_data_type_command(name) && ctx.engine.contains(args.arg(input, 1)) {
        out.extend_from_slice(errors::ERR_WRONGTYPE);
        return;
    }
    errors::unknown_command(out, name, args.iter(input).skip(1));
}

fn is_data_type_command(name: &[u8]) -> bool {
    let mut buf = [0u8; COMMAND_NAME_LEN_MAX];
    lowercase_name(name, &mut buf)
        .is_some_and(|lower| DATA_TYPE_COMMANDS.iter().any(|c| c.as_bytes() == lower))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_type_names_are_known_to_redis_not_to_strata() {
        for name in DATA_TYPE_COMMANDS {
            assert!(
                super::super::table::lookup(name.as_bytes()).is_none(),
                "{name}"
            );
            assert!(is_data_type_command(name.to_ascii_uppercase().as_bytes()));
        }
        assert!(!is_data_type_command(b"get"));
    }
}
