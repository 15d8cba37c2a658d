//! docs/COMPATIBILITY.md, generated from the command table (`table::COMMANDS`: which Redis
//! commands strata runs, and how each differs) and the list of Redis 7.0.15's commands, so the
//! document cannot drift from the code: the test below fails when it differs from what it would
//! generate, and writes the new text when `STRATA_WRITE_COMPATIBILITY=1`.

use std::fmt::Write as _;

use super::table::COMMANDS;

/// Redis 7.0.15's commands, one per line: name and ACL category.
const REDIS_COMMANDS: &str = include_str!("redis-7.0.15-commands.txt");

/// memcached 1.6.18's commands: (command, how strata answers it).
const MEMCACHED: &[(&str, &str)] = &[
    ("get, gets, gat, gats", "supported"),
    ("set, add, replace, append, prepend, cas", "supported"),
    ("incr, decr, touch, delete", "supported"),
    ("mg, ms, md, ma, mn, me (meta)", "supported; `mg l` (last access) is refused as memcached refuses a flag it lacks: strata keeps no access time"),
    ("flush_all, version, verbosity, quit", "supported"),
    ("cache_memlimit", "supported: the memory tier's limit while running, as Redis's `CONFIG SET maxmemory`; the pool does not grow, so a limit at or past it means the whole pool, and one under what the shards need (two segments each, and the cleaner's two) is `MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust`"),
    ("shutdown", "supported (`shutdown graceful` too); the pool is closed cleanly"),
    ("stats, stats settings, items, slabs, reset", "supported, with strata's figures and `strata_*` lines"),
    ("stats conns", "every connection of both protocols, keyed by client id; `state` is always `conn_waiting`"),
    ("stats sizes, extstore, detail", "answered, empty (sizes: `disabled`)"),
    ("lru_crawler metadump", "supported (`all`, `hash` or class ids; strata has one class, 1): every item, paused at the output limit and resumed; `la` is 0 (strata keeps no access time); a dump pipelined behind other commands runs (memcached refuses it)"),
    ("stats cachedump", "supported: class 1 lists every item (memcached lists only its cold LRU's), up to the limit and 2 MiB, as memcached"),
    ("lru_crawler (other subcommands), slabs (reassign, automove), lru, watch, extstore (commands), debugtime, misbehave", "refused (`ERROR`)"),
    ("binary protocol", "refused: a binary `Not supported` response, then the connection closes"),
    ("any command on a key holding a Redis hash", "the key reads as absent: gets miss, `set` and `add` replace it, `append`, `incr`, `cas`, `touch` and the meta commands find nothing; `delete` acts on it"),
];

/// Commands newer than Redis 7.0.15 that strata runs, with the release that added them (their
/// replies follow that release; no reference server of it runs in the tests).
const LATER_COMMANDS: &[(&str, &str)] = &[
    ("hexpire", "Redis 7.4, Valkey 9.0"),
    ("hpexpire", "Redis 7.4, Valkey 9.0"),
    ("hexpireat", "Redis 7.4, Valkey 9.0"),
    ("hpexpireat", "Redis 7.4, Valkey 9.0"),
    ("httl", "Redis 7.4, Valkey 9.0"),
    ("hpttl", "Redis 7.4, Valkey 9.0"),
    ("hexpiretime", "Redis 7.4, Valkey 9.0"),
    ("hpexpiretime", "Redis 7.4, Valkey 9.0"),
    ("hpersist", "Redis 7.4, Valkey 9.0"),
];

/// Why strata refuses a Redis command of ACL category `category`.
fn refusal(category: &str) -> &'static str {
    match category {
        "@list" | "@set" | "@sortedset" | "@hash" | "@stream" | "@geo" => {
            "refused: a data type strata does not store yet"
        }
        "@bitmap" | "@hyperloglog" => "refused: not yet (operations on string values)",
        "@pubsub" => "refused: pub/sub is not there yet",
        "@scripting" => "refused: scripting is not there yet",
        _ => "refused",
    }
}

/// The document.
pub(crate) fn markdown() -> String {
    let mut md = String::from(
        "# Compatibility\n\n\
         Generated from the command table (`crates/server/src/resp_exec/table.rs`) by \
         `cargo test -p strata-server compatibility` (set `STRATA_WRITE_COMPATIBILITY=1` to \
         rewrite it); do not edit by hand. \"Supported\" means the replies match Redis 7.0.15 \
         byte for byte where the differential tests (`resp_exec_redis_compat.rs`) check them; \
         \"differs\" says how. A refused command gets Redis's `unknown command` error, or \
         `WRONGTYPE` for a data-type command on a key holding a string or a hash.\n\n## Redis 7.0.15\n\n",
    );
    let mut supported = 0;
    let mut rows = String::new();
    for line in REDIS_COMMANDS.lines().filter(|l| !l.starts_with('#')) {
        let (name, category) = line.split_once(' ').expect("name and category");
        let status = match COMMANDS.iter().find(|c| c.name == name) {
            Some(command) if command.differs.is_empty() => {
                supported += 1;
                "supported".to_owned()
            }
            Some(command) => {
                supported += 1;
                format!("differs: {}", command.differs)
            }
            None => refusal(category).to_owned(),
        };
        let _ = writeln!(rows, "| {} | {category} | {status} |", name.to_uppercase());
    }
    let total = REDIS_COMMANDS
        .lines()
        .filter(|l| !l.starts_with('#'))
        .count();
    let _ = writeln!(
        md,
        "{supported} of Redis's {total} commands run.\n\n| command | category | strata |\n|---|---|---|"
    );
    md.push_str(&rows);
    md.push_str(
        "\n## Newer than Redis 7.0.15\n\nReplies follow the release named; the differential \
         tests cannot check them (no such server runs in them), the integration tests do.\n\n\
         | command | added in | strata |\n|---|---|---|\n",
    );
    for (name, release) in LATER_COMMANDS {
        let command = COMMANDS
            .iter()
            .find(|c| c.name == *name)
            .expect("a later command is in the table");
        let status = if command.differs.is_empty() {
            "supported".to_owned()
        } else {
            format!("differs: {}", command.differs)
        };
        let _ = writeln!(md, "| {} | {release} | {status} |", name.to_uppercase());
    }
    md.push_str("\n## memcached 1.6.18\n\n| command | strata |\n|---|---|\n");
    for (command, status) in MEMCACHED {
        let _ = writeln!(md, "| {command} | {status} |");
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command the table runs is a Redis 7.0.15 command or a later one the document
    /// lists (so the document lists it).
    #[test]
    fn every_table_command_is_a_redis_command() {
        for command in COMMANDS {
            let in_7_0 = REDIS_COMMANDS
                .lines()
                .any(|line| line.split(' ').next() == Some(command.name));
            let later = LATER_COMMANDS.iter().any(|(name, _)| *name == command.name);
            assert!(
                in_7_0 != later,
                "{} must be in Redis 7.0.15's list or in LATER_COMMANDS, not both",
                command.name
            );
        }
    }

    /// docs/COMPATIBILITY.md is what the table generates.
    #[test]
    fn compatibility_document_matches_the_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/COMPATIBILITY.md");
        let generated = markdown();
        if std::env::var_os("STRATA_WRITE_COMPATIBILITY").is_some() {
            std::fs::write(path, &generated).unwrap();
        }
        let current = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            current == generated,
            "docs/COMPATIBILITY.md differs from the command table: run \
             STRATA_WRITE_COMPATIBILITY=1 cargo test -p strata-server compatibility"
        );
    }
}
