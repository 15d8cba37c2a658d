//! The flash scenario's arithmetic, checked against sums done by hand: sizes after
//! `--size-scale`, the items-kept estimate from a sample, DRAM per flash-resident item and
//! bytes written per byte of values demoted.

use strata_bench::compare::flash_math::{
    check_stride, dram_per_flash_item, index_bytes_per_flash_item, items_kept, keys_for_bytes,
    keys_sampled, scaled_mib, write_amplification, FlashSizes, MIB,
};

#[test]
fn sizes_follow_the_scale() {
    // The full size: 256 MiB, 4 GiB of flash, 8 GiB of 16 B keys + 1 KiB values.
    let full = FlashSizes::new(256, 4096, 8192, 1.0, 1040.0);
    assert_eq!((full.memory_mib, full.flash_mib), (256, 4096));
    assert_eq!(full.offered_bytes, 8192 * MIB);
    assert_eq!(full.keys, 8192 * MIB / 1040); // 8_259_552, rounded down
                                              // The smoke size: a quarter of everything, the same 32x ratio.
    let smoke = FlashSizes::new(256, 4096, 8192, 0.25, 1040.0);
    assert_eq!((smoke.memory_mib, smoke.flash_mib), (64, 1024));
    assert_eq!(smoke.keys, 2048 * MIB / 1040);
    assert_eq!(scaled_mib(3, 0.5), 2, "1.5 rounds to 2");
    assert_eq!(scaled_mib(256, 0.0001), 1, "never below 1 MiB");
    assert_eq!(keys_for_bytes(10, 1040.0), 1, "at least one key");
}

#[test]
fn memory_only_run_offers_twice_the_budget() {
    let sizes = FlashSizes::new(256, 4096, 8192, 1.0, 1040.0);
    assert_eq!(sizes.memory_only_keys(), 512 * MIB / 1040);
    // Never more keys than the scenario has.
    let tiny = FlashSizes::new(256, 4096, 300, 1.0, 1040.0);
    assert_eq!(tiny.memory_only_keys(), tiny.keys);
    assert!((sizes.budget_items() - 256.0 * 1_048_576.0 / 1040.0).abs() < 1e-6);
}

#[test]
fn sampled_items_kept() {
    // 1,000,000 keys, at most 200,000 read: every 5th key.
    assert_eq!(check_stride(1_000_000, 200_000), 5);
    assert_eq!(check_stride(1_000_001, 200_000), 6, "rounds the stride up");
    assert_eq!(
        check_stride(100, 200_000),
        1,
        "small key spaces are read whole"
    );
    assert_eq!(keys_sampled(10, 3), 4, "keys 0, 3, 6, 9");
    // 50,000 of 200,000 sampled keys found: a quarter of 1,000,000.
    assert!((items_kept(50_000, 1_000_000, 5) - 250_000.0).abs() < 1e-6);
    assert!(
        (items_kept(4, 10, 3) - 10.0).abs() < 1e-9,
        "every sampled key found"
    );
    assert!(items_kept(0, 10, 3).abs() < 1e-9);
}

#[test]
fn dram_per_flash_item_charges_growth_beyond_the_memory_tier() {
    // With flash: RSS grew 300 MiB and 3,000,000 items were kept; memory alone grew 260 MiB
    // and kept 250,000. 40 MiB over 2,750,000 extra items: 15.25 B each.
    let dram = dram_per_flash_item(300 * MIB, 260 * MIB, 3_000_000.0, 250_000.0).unwrap();
    assert!(
        (dram - 40.0 * 1_048_576.0 / 2_750_000.0).abs() < 1e-9,
        "{dram}"
    );
    // Less growth than memory alone (noise, or a leaner flash configuration) stays signed.
    let lean = dram_per_flash_item(250 * MIB, 260 * MIB, 3_000_000.0, 250_000.0).unwrap();
    assert!(lean < 0.0);
    // No items beyond memory, or fewer than 5% more: nothing to divide by.
    assert_eq!(
        dram_per_flash_item(300 * MIB, 260 * MIB, 250_000.0, 250_000.0),
        None
    );
    assert_eq!(
        dram_per_flash_item(300 * MIB, 260 * MIB, 260_000.0, 250_000.0),
        None
    );
    assert_eq!(
        dram_per_flash_item(300 * MIB, 260 * MIB, 100_000.0, 250_000.0),
        None
    );
    assert!(dram_per_flash_item(300 * MIB, 260 * MIB, 262_500.0, 250_000.0).is_some());
}

#[test]
fn write_amplification_is_bytes_written_over_value_bytes_demoted() {
    // memcached's extstore writes header + key + value: 1,100 B per 1,024 B value.
    let wa = write_amplification(1_100 * 1_000, 1_000.0, 1024.0).unwrap();
    assert!((wa - 1_100.0 / 1_024.0).abs() < 1e-12, "{wa}");
    // A 4 KiB bucket rewritten per 100 B item (BigHash-style): about 41x.
    let bucket = write_amplification(4096 * 10, 10.0, 100.0).unwrap();
    assert!((bucket - 40.96).abs() < 1e-9);
    assert_eq!(
        write_amplification(4096, 0.0, 100.0),
        None,
        "nothing demoted"
    );
}

#[test]
fn flash_reads_per_flash_hit_counts_requests_reads_only() {
    use std::collections::BTreeMap;
    use strata_bench::compare::flash_report::flash_reads_per_flash_hit;
    let delta = |pairs: &[(&str, f64)]| -> BTreeMap<String, f64> {
        pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect()
    };
    // strata: 1,150 reads, 100 of them settling suspects, for 1,000 hits.
    let strata = delta(&[
        ("strata_flash_reads", 1150.0),
        ("strata_flash_settle_reads", 100.0),
        ("strata_flash_hits", 1000.0),
        ("get_extstore", 1000.0),
    ]);
    assert_eq!(flash_reads_per_flash_hit(&strata), Some(1.05));
    // memcached: 600 objects read for 500 GETs sent to extstore, 20 of them misses there.
    let memcached = delta(&[
        ("extstore_objects_read", 600.0),
        ("get_extstore", 500.0),
        ("miss_from_extstore", 20.0),
    ]);
    assert_eq!(flash_reads_per_flash_hit(&memcached), Some(600.0 / 480.0));
    // No flash, or no flash hit in the phase: no figure.
    assert_eq!(
        flash_reads_per_flash_hit(&delta(&[("get_hits", 9.0)])),
        None
    );
    assert_eq!(
        flash_reads_per_flash_hit(&delta(&[
            ("strata_flash_reads", 5.0),
            ("strata_flash_hits", 0.0)
        ])),
        None
    );
}

#[test]
fn index_bytes_per_flash_item_counts_a_slot_share_and_the_filters() {
    // 1M items in a 10 MB index (10 B each), 600K of them on flash with 600 KB of filters.
    let per_item = index_bytes_per_flash_item(10_000_000, 1_000_000, 600_000, 600_000);
    assert_eq!(per_item, Some(11.0));
    // A half-empty index costs its flash items more per item.
    assert_eq!(
        index_bytes_per_flash_item(20_000_000, 1_000_000, 0, 500_000),
        Some(20.0)
    );
    assert_eq!(index_bytes_per_flash_item(1, 0, 0, 0), None, "no items");
    assert_eq!(
        index_bytes_per_flash_item(1_000, 100, 0, 0),
        None,
        "nothing on flash"
    );
}
