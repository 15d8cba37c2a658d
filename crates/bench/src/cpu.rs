//! CPU time and memory of a process, read from `/proc`: the generator's own cost, and the
//! server's CPU per request and resident set size.
//!
//! `/proc/PID/stat` counts user and system time for all of a process's threads, including
//! threads that already exited, in clock ticks (`getconf CLK_TCK`, 100 on Linux: 10 ms), so
//! figures are meaningful for runs of a second or more.

use std::fs;
use std::process::Command;
use std::sync::OnceLock;

/// Clock ticks per second when `getconf` is unavailable (Linux's USER_HZ on every common arch).
const CLOCK_TICKS_PER_SEC_DEFAULT: u64 = 100;

/// CPU time consumed so far by `pid` (or this process for `None`), in seconds.
///
/// # Errors
/// When `/proc/PID/stat` is missing (the process exited) or malformed.
pub fn cpu_secs(pid: Option<u32>) -> std::io::Result<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let text = fs::read_to_string(path)?;
    let ticks = parse_stat_ticks(&text).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "unexpected /proc/PID/stat format",
        )
    })?;
    #[allow(clippy::cast_precision_loss)]
    let secs = ticks as f64 / clock_ticks_per_sec() as f64;
    Ok(secs)
}

/// The resident set size of `pid`, in bytes, from `VmRSS` in `/proc/PID/status`.
///
/// # Errors
/// When the file is missing or has no `VmRSS` line.
pub fn rss_bytes(pid: u32) -> std::io::Result<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_status_rss_bytes(&text).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "no VmRSS in /proc/PID/status",
        )
    })
}

/// Bytes a process caused to be read from and written to storage (not the page cache).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IoBytes {
    /// `read_bytes` of `/proc/PID/io`.
    pub read_bytes: u64,
    /// `write_bytes` of `/proc/PID/io`: counted when the process dirties page-cache pages or
    /// writes with O_DIRECT, so buffered writes count before they reach the disk.
    pub write_bytes: u64,
}

/// The storage I/O of `pid` so far, from `/proc/PID/io` (readable for one's own processes).
///
/// # Errors
/// When the file is missing or lacks the two fields.
pub fn io_bytes(pid: u32) -> std::io::Result<IoBytes> {
    let text = fs::read_to_string(format!("/proc/{pid}/io"))?;
    parse_io(&text).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "no read_bytes/write_bytes in /proc/PID/io",
        )
    })
}

/// The machine's CPU time so far, in ticks, from the `cpu` line of `/proc/stat`: `(steal,
/// total)`. Steal is time the hypervisor ran something else while a virtual CPU wanted to run:
/// on a shared VM the tail latencies of a phase follow it.
pub fn cpu_steal_ticks() -> std::io::Result<(u64, u64)> {
    parse_proc_stat_steal(&fs::read_to_string("/proc/stat")?).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "no cpu line in /proc/stat")
    })
}

/// `(steal, total)` ticks of the aggregate `cpu` line: user nice system idle iowait irq
/// softirq steal (guest time is already inside user and nice).
fn parse_proc_stat_steal(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|line| line.starts_with("cpu "))?;
    let ticks: Vec<u64> = line
        .split_ascii_whitespace()
        .skip(1)
        .take(8)
        .map(|t| t.parse().ok())
        .collect::<Option<_>>()?;
    (ticks.len() == 8).then(|| (ticks[7], ticks.iter().sum()))
}

/// `read_bytes` and `write_bytes` from the text of `/proc/PID/io`.
fn parse_io(text: &str) -> Option<IoBytes> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.trim().parse().ok())
    };
    Some(IoBytes {
        read_bytes: field("read_bytes")?,
        write_bytes: field("write_bytes")?,
    })
}

/// utime + stime, in ticks, from the text of `/proc/PID/stat`.
fn parse_stat_ticks(text: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces or parentheses, so
    // count fields from the last ')'. utime and stime are fields 14 and 15.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// `VmRSS` in bytes from the text of `/proc/PID/status`.
fn parse_status_rss_bytes(text: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Clock ticks per second, asked of `getconf` once.
fn clock_ticks_per_sec() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .filter(|&ticks| ticks > 0)
            .unwrap_or(CLOCK_TICKS_PER_SEC_DEFAULT)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let text = "1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 1 0";
        assert_eq!(parse_stat_ticks(text), Some(325));
        assert_eq!(parse_stat_ticks("1 (x) S 1"), None);
    }

    #[test]
    fn parses_status_rss() {
        let text = "Name:\tredis\nVmPeak:\t  100 kB\nVmRSS:\t    2048 kB\nThreads:\t4\n";
        assert_eq!(parse_status_rss_bytes(text), Some(2048 * 1024));
        assert_eq!(parse_status_rss_bytes("Name: x\n"), None);
    }

    #[test]
    fn parses_io() {
        let text = "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\n\
                    write_bytes: 8192\ncancelled_write_bytes: 0\n";
        let io = parse_io(text).unwrap();
        assert_eq!((io.read_bytes, io.write_bytes), (4096, 8192));
        assert_eq!(parse_io("rchar: 1\n"), None);
    }

    #[test]
    fn parses_steal() {
        let text = "cpu  100 5 50 800 10 1 4 30 0 0\ncpu0 50 2 25 400 5 0 2 15 0 0\n";
        assert_eq!(parse_proc_stat_steal(text), Some((30, 1000)));
        assert_eq!(parse_proc_stat_steal("cpu0 1 2 3\n"), None);
        assert_eq!(parse_proc_stat_steal("cpu  1 2 3\n"), None);
    }

    #[test]
    fn reads_this_process() {
        let (steal, total) = cpu_steal_ticks().unwrap();
        assert!(steal <= total && total > 0);
        assert!(cpu_secs(None).unwrap() >= 0.0);
        assert!(rss_bytes(std::process::id()).unwrap() > 0);
        assert!(clock_ticks_per_sec() > 0);
        assert!(io_bytes(std::process::id()).is_ok());
    }
}
