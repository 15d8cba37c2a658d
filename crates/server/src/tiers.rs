//! The storage tiers as every stats surface shows them: one list of the flash tier's fields,
//! which memcached's `stats`, Redis's `INFO` and `/metrics` each render in their own syntax, so
//! the three never disagree about what a tier holds.

use strata_engine::{EngineStats, FlashStats};

/// Whether a field only grows (a Prometheus counter) or goes up and down (a gauge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Grows from 0 at start-up.
    Counter,
    /// A current amount.
    Gauge,
}

/// One field of a tier's stats.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    /// Name within the tier (`items`, `written_bytes`); surfaces add their prefix.
    pub name: &'static str,
    /// Counter or gauge.
    pub kind: Kind,
    /// What it counts (the Prometheus HELP text).
    pub help: &'static str,
    /// Its value now.
    pub value: u64,
}

/// A field (the lists below are long: one call a field).
const fn field(name: &'static str, kind: Kind, help: &'static str, value: u64) -> Field {
    Field {
        name,
        kind,
        help,
        value,
    }
}

/// The memory tier's space and cleaner fields, in the order every surface lists them (as
/// `strata_memory_<name>` in `stats` and `/metrics`, `memory_<name>` in `INFO`).
pub fn memory_fields(engine: &EngineStats) -> Vec<Field> {
    use Kind::{Counter, Gauge};
    vec![
        field(
            "live_bytes",
            Gauge,
            "Bytes of live records in the memory tier.",
            engine.live_bytes,
        ),
        field(
            "dead_bytes",
            Gauge,
            "Bytes of segments holding no live record that take no more writes: what the cleaner can give back.",
            engine.dead_bytes,
        ),
        field(
            "written_bytes",
            Counter,
            "Bytes of records written by requests.",
            engine.written_bytes,
        ),
        field(
            "cleaner_passes",
            Counter,
            "Cleaner passes run by writes that needed a segment.",
            engine.cleaner_passes,
        ),
        field(
            "cleaner_steps_ahead",
            Counter,
            "Cleaner steps run ahead of need by the maintenance thread (one victim each).",
            engine.cleaner_steps_ahead,
        ),
        field(
            "cleaner_segments_freed",
            Counter,
            "Segments the cleaner freed by moving their live records.",
            engine.cleaner_segments_freed,
        ),
        field(
            "cleaner_items_moved",
            Counter,
            "Live records the cleaner moved.",
            engine.cleaner_items_moved,
        ),
        field(
            "cleaner_bytes_moved",
            Counter,
            "Bytes the cleaner copied (over written_bytes: the write amplification).",
            engine.cleaner_bytes_moved,
        ),
        field(
            "cleaner_time_us",
            Counter,
            "Microseconds spent in cleaner passes, each holding its shard.",
            engine.cleaner_time_ns / 1000,
        ),
        field(
            "cleaner_pass_max_us",
            Gauge,
            "The longest cleaner pass, in microseconds.",
            engine.cleaner_pass_max_ns / 1000,
        ),
    ]
}

/// The memory tier's write amplification in thousandths: bytes the cleaner copied per byte
/// requests wrote (0 before any write).
pub fn write_amplification_milli(engine: &EngineStats) -> u64 {
    (engine.cleaner_bytes_moved * 1000)
        .checked_div(engine.written_bytes)
        .unwrap_or(0)
}

/// The flash tier's fields, in the order every surface lists them.
pub fn flash_fields(flash: &FlashStats) -> Vec<Field> {
    let mut fields = flash_gauges(flash);
    fields.extend(flash_counters(flash));
    fields.extend(flash_counters_more(flash));
    fields
}

/// The flash tier's gauges.
fn flash_gauges(flash: &FlashStats) -> Vec<Field> {
    use Kind::Gauge;
    vec![
        field(
            "items",
            Gauge,
            "Items whose record is on flash.",
            flash.items,
        ),
        field(
            "bytes",
            Gauge,
            "Bytes of the flash medium.",
            flash.medium_bytes,
        ),
        field(
            "suspects",
            Gauge,
            "Flash entries sharing hash bits with a key written since, not yet read.",
            flash.suspects,
        ),
        field(
            "region_size_bytes",
            Gauge,
            "Bytes per flash region (written and reclaimed whole).",
            flash.region_size_bytes,
        ),
        field(
            "read_align_bytes",
            Gauge,
            "Bytes flash reads are aligned and rounded to (the medium's direct-I/O alignment).",
            flash.read_align_bytes,
        ),
        field(
            "record_align_bytes",
            Gauge,
            "Bytes records are aligned to on the flash medium (8 up to 256 GiB, larger for larger media; chosen when it was formatted).",
            flash.record_align_bytes,
        ),
        field(
            "regions_total",
            Gauge,
            "Regions on the medium.",
            flash.regions_total,
        ),
        field(
            "regions_written",
            Gauge,
            "Regions written and holding records.",
            flash.regions_written,
        ),
        field(
            "regions_free",
            Gauge,
            "Regions free for new records.",
            flash.regions_free,
        ),
        field(
            "regions_queued",
            Gauge,
            "Sealed regions waiting to be written (the write queue).",
            flash.regions_queued,
        ),
        field(
            "buffer_bytes",
            Gauge,
            "DRAM held by region buffers (open regions and regions being written).",
            flash.buffer_bytes,
        ),
    ]
}

/// The flash tier's read and reclaim counters (and its key filters' size, listed among them).
fn flash_counters(flash: &FlashStats) -> Vec<Field> {
    use Kind::{Counter, Gauge};
    vec![
        field("hits", Counter, "Reads served from flash.", flash.hits),
        field(
            "misses",
            Counter,
            "Reads that looked on flash and found nothing.",
            flash.misses,
        ),
        field(
            "settle_reads",
            Counter,
            "Medium reads the flash thread made to settle suspects (which key an entry beside a newer write holds); reads for requests are reads minus these.",
            flash.settle_reads,
        ),
        field(
            "reclaim_read_bytes",
            Counter,
            "Bytes reclaim read: each reclaimed region's directory (the whole region where its directory failed its check).",
            flash.reclaim_read_bytes,
        ),
        field(
            "reclaim_full_reads",
            Counter,
            "Reclaims that read the whole region because its directory was unreadable or damaged.",
            flash.reclaim_full_reads,
        ),
        field(
            "filtered_reads",
            Counter,
            "Reads not made: a written region's key filter ruled the key out (another key's record shared its stored hash bits).",
            flash.filtered_reads,
        ),
        field(
            "filter_bytes",
            Gauge,
            "DRAM held by the written regions' key filters (about one byte per record).",
            flash.filter_bytes,
        ),
        field(
            "promoted_items",
            Counter,
            "Items moved back to memory after being read often.",
            flash.promoted_items,
        ),
        field(
            "demoted_items",
            Counter,
            "Items evicted from memory and written into a flash region.",
            flash.appended_items,
        ),
        field(
            "demoted_bytes",
            Counter,
            "Region bytes those items took (stamps and padding included).",
            flash.appended_bytes,
        ),
        field(
            "demoted_value_bytes",
            Counter,
            "Value bytes among them.",
            flash.appended_value_bytes,
        ),
    ]
}

/// The flash tier's other counters.
fn flash_counters_more(flash: &FlashStats) -> Vec<Field> {
    use Kind::Counter;
    vec![
        field(
            "refused_items",
            Counter,
            "Evicted items flash could not take (behind, or at its write rate): dropped.",
            flash.refused_items,
        ),
        field(
            "written_regions",
            Counter,
            "Regions written to the medium.",
            flash.written_regions,
        ),
        field(
            "written_bytes",
            Counter,
            "Bytes written to the medium (region headers and padding included).",
            flash.written_bytes,
        ),
        field(
            "reclaimed_regions",
            Counter,
            "Regions reclaimed (whole once every record expired, else oldest first).",
            flash.reclaimed_regions,
        ),
        field(
            "evictions",
            Counter,
            "Items dropped from the cache when their region was reclaimed.",
            flash.evicted_items,
        ),
        field(
            "staged_reads",
            Counter,
            "Flash reads served from a record read ahead for the request while it waited.",
            flash.staged_reads,
        ),
        field(
            "staged_dropped",
            Counter,
            "Records read ahead that no read took (the key was written meanwhile, or the connection went away).",
            flash.staged_dropped,
        ),
        field("reads", Counter, "Reads of the medium.", flash.reads),
        field(
            "read_bytes",
            Counter,
            "Bytes read from the medium.",
            flash.read_bytes,
        ),
        field(
            "read_errors",
            Counter,
            "Reads the medium failed.",
            flash.read_errors,
        ),
        field(
            "write_errors",
            Counter,
            "Region writes the medium failed (their items were dropped).",
            flash.write_errors,
        ),
        field(
            "damaged_records",
            Counter,
            "Flash records that failed their checks on read (never served).",
            flash.damaged_records,
        ),
    ]
}

/// Reads the memory tier served: every engine hit that flash did not serve.
pub fn memory_hits(engine: &EngineStats) -> u64 {
    let flash_hits = engine.flash.as_ref().map_or(0, |f| f.hits);
    engine.hits.saturating_sub(flash_hits)
}

/// The flash read latency histogram as cumulative (upper bound in microseconds, count) pairs,
/// the last bound `None` (+Inf).
pub fn flash_read_latency_cumulative(flash: &FlashStats) -> Vec<(Option<u64>, u64)> {
    let last = flash.read_latency_us.len() - 1;
    let mut total = 0;
    flash
        .read_latency_us
        .iter()
        .enumerate()
        .map(|(i, count)| {
            total += count;
            ((i < last).then_some(1u64 << i), total)
        })
        .collect()
}

/// A one-line summary of the flash tier for logs and `INFO`'s `tier_flash`.
pub fn flash_summary(flash: &FlashStats) -> String {
    format!(
        "medium=file,io={},direct={},bytes={},items={},regions={}/{}",
        flash.io_engine,
        if flash.direct_io { "yes" } else { "no" },
        flash.medium_bytes,
        flash.items,
        flash.regions_written,
        flash.regions_total
    )
}
