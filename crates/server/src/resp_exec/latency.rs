//! `LATENCY LATEST|HISTORY|RESET|DOCTOR|HELP` over the latency monitor (`crate::latency`),
//! and `LATENCY HISTOGRAM` over the per-command histograms (`latency_tracking`), with Redis
//! 7.0's replies. GRAPH is refused with a message saying so.

use strata_protocol::resp::{encode, errors, name_eq};

use super::{Call, State};

/// `LATENCY <subcommand> ...`.
pub(crate) fn latency(state: &mut State, call: &Call<'_>, out: &mut Vec<u8>) {
    // Redis 7.0's subcommand arities: n exactly, -n at least.
    const ARITIES: &[(&str, i32)] = &[
        ("latest", 2),
        ("history", 3),
        ("reset", -2),
        ("doctor", 2),
        ("graph", 3),
        ("help", 2),
        ("histogram", -2),
    ];
    let sub = call.arg(1);
    let len = call.len();
    let Some(&(name, arity)) = ARITIES
        .iter()
        .find(|(name, _)| name_eq(sub, name.as_bytes()))
    else {
        errors::unknown_subcommand(out, b"latency", sub);
        return;
    };
    let fits = if arity >= 0 {
        len == arity.unsigned_abs() as usize
    } else {
        len >= arity.unsigned_abs() as usize
    };
    if !fits {
        errors::wrong_args(out, format!("latency|{name}").as_bytes());
        return;
    }
    let monitor = &call.ctx.latency;
    if name == "latest" {
        let events = monitor.events();
        encode::array_len(out, events.len());
        for (name, history) in events {
            let (secs, ms) = history.samples.back().copied().unwrap_or((0, 0));
            encode::array_len(out, 4);
            encode::bulk(out, name.as_bytes());
            encode::integer(out, i64::try_from(secs).unwrap_or(i64::MAX));
            encode::integer(out, i64::try_from(ms).unwrap_or(i64::MAX));
            encode::integer(out, i64::try_from(history.max_ms).unwrap_or(i64::MAX));
        }
    } else if name == "history" {
        let events = monitor.events();
        let found = events
            .iter()
            .find(|(name, _)| name_eq(call.arg(2), name.as_bytes()));
        let samples = found.map(|(_, history)| &history.samples);
        encode::array_len(out, samples.map_or(0, |s| s.len()));
        for &(secs, ms) in samples.into_iter().flatten() {
            encode::array_len(out, 2);
            encode::integer(out, i64::try_from(secs).unwrap_or(i64::MAX));
            encode::integer(out, i64::try_from(ms).unwrap_or(i64::MAX));
        }
    } else if name == "reset" {
        let names: Vec<&[u8]> = call.args_from(2).collect();
        encode::integer(
            out,
            i64::try_from(monitor.reset(&names)).unwrap_or(i64::MAX),
        );
    } else if name == "doctor" {
        encode::verbatim(out, state.version, b"txt", doctor(call).as_bytes());
    } else if name == "help" {
        help(out);
    } else if name == "histogram" {
        histogram(state, call, out);
    } else {
        encode::error(
            out,
            b"ERR strata does not draw latency graphs: use LATENCY HISTORY, LATENCY HISTOGRAM, \
              INFO latencystats or /metrics",
        );
    }
}

/// `LATENCY HISTOGRAM [command ...]`: per command that ran (those named, unknown names
/// skipped), `calls` and `histogram_usec`, the cumulative calls per power-of-two bucket.
fn histogram(state: &State, call: &Call<'_>, out: &mut Vec<u8>) {
    let named: Vec<&'static super::table::Command> =
        call.args_from(2).filter_map(super::table::lookup).collect();
    if call.len() > 2 && named.is_empty() {
        encode::map_len(out, state.version, 0);
        return;
    }
    let reports = call.ctx.resp_commands.latency.cumulative(&named);
    encode::map_len(out, state.version, reports.len());
    for report in reports {
        encode::bulk(out, report.name.as_bytes());
        encode::map_len(out, state.version, 2);
        encode::bulk(out, b"calls");
        encode::integer(out, i64::try_from(report.calls).unwrap_or(i64::MAX));
        encode::bulk(out, b"histogram_usec");
        encode::map_len(out, state.version, report.buckets.len());
        for (bound_us, calls) in report.buckets {
            encode::integer(out, i64::try_from(bound_us).unwrap_or(i64::MAX));
            encode::integer(out, i64::try_from(calls).unwrap_or(i64::MAX));
        }
    }
}

/// LATENCY DOCTOR's report: the threshold and, per event, its spikes.
fn doctor(call: &Call<'_>) -> String {
    let monitor = &call.ctx.latency;
    let threshold = monitor.threshold_ms();
    if threshold == 0 {
        return "The latency monitor is off (latency-monitor-threshold is 0): CONFIG SET \
                latency-monitor-threshold <milliseconds> turns it on.\n"
            .to_owned();
    }
    let events = monitor.events();
    if events.is_empty() {
        return format!("No command took {threshold} ms or more since the monitor started.\n");
    }
    let mut report = format!("Spikes of {threshold} ms or more, per event:\n");
    for (name, history) in events {
        let total: u64 = history.samples.iter().map(|&(_, ms)| ms).sum();
        let average = total / history.samples.len().max(1) as u64;
        report.push_str(&format!(
            "- {name}: {} spikes kept, average {average} ms, worst ever {} ms\n",
            history.samples.len(),
            history.max_ms
        ));
    }
    report
}

fn help(out: &mut Vec<u8>) {
    let lines: [&[u8]; 13] = [
        b"LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"DOCTOR",
        b"    Return a human readable latency analysis report.",
        b"HISTOGRAM [<command> ...]",
        b"    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
        b"    If no commands are specified then all histograms are replied.",
        b"HISTORY <event>",
        b"    Return time-latency samples for the <event> class.",
        b"LATEST",
        b"    Return the latest latency samples for all events.",
        b"RESET [<event> ...]",
        b"    Reset latency data of one or more <event> classes.",
        b"    (default: reset all data for all event classes)",
    ];
    super::write_help(out, &lines);
}
