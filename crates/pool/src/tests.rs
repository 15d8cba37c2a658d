//! Pool tests: create, reopen, refuse what is not ours, persistence domains, crash images.
#![allow(
    clippy::too_many_lines,
    reason = "a test scenario reads best as one function"
)]

use super::*;

const SMALL: Geometry = Geometry {
    segment_size_bytes: 64 * 1024,
    segment_count: 4,
};

fn options(location: Location, mode: OpenMode) -> PoolOptions {
    PoolOptions {
        location,
        geometry: SMALL,
        mode,
    }
}

fn temp_path(name: &str) -> PathBuf {
    let dir = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    PathBuf::from(dir).join(format!("strata-pool-test-{}-{name}", std::process::id()))
}

struct Cleanup(PathBuf);
impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn dram_pool_hands_out_disjoint_zeroed_segments() {
    let mut pool = Pool::open(options(Location::Dram, OpenMode::OpenOrCreate)).unwrap();
    assert_eq!(pool.backend(), Backend::Dram);
    assert_eq!(pool.domain().summary(), "none");
    let mut segments = pool.take_segments();
    assert_eq!(segments.len(), 4);
    for (i, segment) in segments.iter_mut().enumerate() {
        assert!(segment.data().iter().all(|&b| b == 0));
        segment.data_mut().fill(i as u8 + 1);
        segment.header_mut().fill(0xF0 | i as u8);
    }
    for (i, segment) in segments.iter().enumerate() {
        assert!(
            segment.data().iter().all(|&b| b == i as u8 + 1),
            "segment {i} was overwritten"
        );
        assert!(segment.header().iter().all(|&b| b == 0xF0 | i as u8));
    }
}

#[test]
fn zero_data_on_dram_returns_zeroes() {
    let mut pool = Pool::open(options(Location::Dram, OpenMode::OpenOrCreate)).unwrap();
    let mut segments = pool.take_segments();
    segments[1].data_mut().fill(9);
    segments[1].zero_data().unwrap();
    assert!(segments[1].data().iter().all(|&b| b == 0));
}

#[test]
fn file_pool_reopens_with_its_bytes_and_knows_it_was_not_closed_cleanly() {
    let path = temp_path("reopen");
    let _cleanup = Cleanup(path.clone());
    {
        let mut pool = Pool::open(options(
            Location::File(path.clone()),
            OpenMode::OpenOrCreate,
        ))
        .unwrap();
        assert_eq!(pool.opened(), Opened::Created);
        let mut segments = pool.take_segments();
        segments[2].data_mut()[..5].copy_from_slice(b"hello");
        segments[2].persist_data(0, 5).unwrap();
        let mut root = pool.take_root();
        root.bytes_mut()[0] = 7;
        root.persist().unwrap();
    }
    let mut pool = Pool::open(options(
        Location::File(path.clone()),
        OpenMode::OpenOrCreate,
    ))
    .unwrap();
    match pool.opened() {
        Opened::Reopened {
            previous,
            same_boot,
        } => {
            assert!(!previous.clean, "never marked clean");
            assert!(same_boot);
        }
        other => panic!("expected a reopen, got {other:?}"),
    }
    assert_eq!(&pool.take_segments()[2].data()[..5], b"hello");
    assert_eq!(pool.take_root().bytes()[0], 7);
    pool.set_clean(true).unwrap();
    drop(pool);
    let state = PoolFile::open(&path).unwrap().state();
    assert!(state.clean);
}

#[test]
fn tmpfs_is_detected() {
    if !Path::new("/dev/shm").is_dir() {
        return;
    }
    let path = temp_path("tmpfs");
    let _cleanup = Cleanup(path.clone());
    let pool = Pool::open(options(Location::File(path), OpenMode::OpenOrCreate)).unwrap();
    assert_eq!(pool.backend(), Backend::TmpfsFile);
    assert_eq!(pool.domain().summary(), "process-crash");
}

#[test]
fn a_second_opener_is_refused_while_the_first_holds_the_lock() {
    let path = temp_path("lock");
    let _cleanup = Cleanup(path.clone());
    let _first = Pool::open(options(
        Location::File(path.clone()),
        OpenMode::OpenOrCreate,
    ))
    .unwrap();
    let err = Pool::open(options(
        Location::File(path.clone()),
        OpenMode::OpenOrCreate,
    ))
    .unwrap_err();
    assert_eq!(err, PoolError::Locked { path });
}

/// A lock released while an opener waits (as a killed process's is, a moment after it was
/// reaped) is taken; one held past the wait is refused.
#[test]
fn an_opener_waits_a_little_for_a_lock_being_released() {
    let path = temp_path("lock-wait");
    let _cleanup = Cleanup(path.clone());
    let open = || {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap()
    };
    let holder = open();
    lock_exclusive_within(&holder, &path, std::time::Duration::ZERO).unwrap();
    let waiter = open();
    let refused = lock_exclusive_within(&waiter, &path, std::time::Duration::from_millis(30));
    assert_eq!(refused, Err(PoolError::Locked { path: path.clone() }));
    let released = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(holder);
    });
    lock_exclusive_within(&waiter, &path, std::time::Duration::from_secs(30)).unwrap();
    released.join().unwrap();
}

#[test]
fn a_foreign_file_is_refused_and_left_untouched() {
    let path = temp_path("foreign");
    let _cleanup = Cleanup(path.clone());
    let content = b"this is somebody's database, not a pool".repeat(200);
    std::fs::write(&path, &content).unwrap();
    let err = Pool::open(options(
        Location::File(path.clone()),
        OpenMode::OpenOrCreate,
    ))
    .unwrap_err();
    assert_eq!(err, PoolError::BadMagic);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        content,
        "the file must not be modified"
    );
}

#[test]
fn other_geometry_and_extension_are_refused_and_a_cut_pool_is_extended_back() {
    let path = temp_path("geometry");
    let _cleanup = Cleanup(path.clone());
    drop(
        Pool::open(options(
            Location::File(path.clone()),
            OpenMode::OpenOrCreate,
        ))
        .unwrap(),
    );
    let mut other = options(Location::File(path.clone()), OpenMode::OpenOrCreate);
    other.geometry.segment_count = 8;
    let err = Pool::open(other).unwrap_err();
    assert!(matches!(
        err,
        PoolError::GeometryMismatch {
            file_segment_count: 4,
            segment_count: 8,
            ..
        }
    ));
    // Cut short: opened, extended back to its length, the cut reported.
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    let cut = SMALL.pool_size_bytes() - 4096;
    file.set_len(cut).unwrap();
    let pool = Pool::open(options(
        Location::File(path.clone()),
        OpenMode::OpenOrCreate,
    ))
    .unwrap();
    assert_eq!(pool.cut_at(), Some(cut));
    assert_eq!(file.metadata().unwrap().len(), SMALL.pool_size_bytes());
    drop(pool);
    // Cut short and of another shape than configured: refused before it is extended (a header
    // describing a huge pool must not make the open fill the file system first).
    file.set_len(cut).unwrap();
    let mut bigger = options(Location::File(path.clone()), OpenMode::OpenOrCreate);
    bigger.geometry.segment_count = SMALL.segment_count * 64;
    let err = Pool::open(bigger).unwrap_err();
    assert!(matches!(err, PoolError::GeometryMismatch { .. }), "{err:?}");
    assert_eq!(file.metadata().unwrap().len(), cut, "not extended");
    file.set_len(SMALL.pool_size_bytes()).unwrap();
    // Longer than its header says: another shape, refused.
    file.set_len(SMALL.pool_size_bytes() + 4096).unwrap();
    let err = Pool::open(options(
        Location::File(path.clone()),
        OpenMode::OpenOrCreate,
    ))
    .unwrap_err();
    assert!(matches!(err, PoolError::Truncated { .. }), "{err:?}");
    let fresh = Pool::open(options(Location::File(path.clone()), OpenMode::Fresh)).unwrap();
    assert_eq!(fresh.opened(), Opened::Created);
}

#[test]
fn crash_image_keeps_persisted_lines_and_chooses_among_unpersisted_ones() {
    let simulation = testing::SimulatedPersistence::new();
    let location = Location::Simulated(simulation.clone());
    let mut pool = Pool::open(options(location, OpenMode::OpenOrCreate)).unwrap();
    let mut segments = pool.take_segments();
    let data = &mut segments[0];
    data.data_mut()[..64].fill(1);
    data.persist_data(0, 64).unwrap();
    data.data_mut()[64..192].fill(2);
    let base = SMALL.data_offset() as usize;
    let none = simulation.crash_image(&pool.live_image(), &mut |_| false);
    assert!(
        none[base..base + 64].iter().all(|&b| b == 1),
        "persisted line kept"
    );
    assert!(
        none[base + 64..base + 192].iter().all(|&b| b == 0),
        "unpersisted lines lost"
    );
    let second_only = simulation.crash_image(&pool.live_image(), &mut |line| line == base / 64 + 2);
    assert!(second_only[base + 64..base + 128].iter().all(|&b| b == 0));
    assert!(second_only[base + 128..base + 192].iter().all(|&b| b == 2));
    let mut reopened =
        Pool::open_image(&second_only, testing::SimulatedPersistence::new()).unwrap();
    assert!(matches!(reopened.opened(), Opened::Reopened { .. }));
    assert!(reopened.take_segments()[0].data()[128..192]
        .iter()
        .all(|&b| b == 2));
}

#[test]
fn injected_persist_faults_start_at_the_chosen_call() {
    // Call 1 is the open's header persist.
    let location = Location::Simulated(testing::SimulatedPersistence::failing_from(3));
    let mut pool = Pool::open(options(location, OpenMode::OpenOrCreate)).unwrap();
    let segments = pool.take_segments();
    assert!(segments[0].persist_data(0, 64).is_ok());
    let err = segments[0].persist_data(0, 64).unwrap_err();
    assert_eq!(err.message, "injected fault");
    assert!(
        segments[0].persist_header().is_err(),
        "every call after the first failure fails"
    );
}

mod media {
    use crate::testing::{Faults, MemoryMedium, SimulatedMedium, SECTOR_SIZE_BYTES};
    use crate::{AlignedBuf, DirectFile, IoEngine, Medium, MediumError};

    fn temp_path(name: &str) -> std::path::PathBuf {
        // The VM disk (ext4) for O_DIRECT; tmpfs has none.
        std::env::temp_dir().join(format!("strata-medium-{}-{name}", std::process::id()))
    }

    #[test]
    fn a_direct_file_reads_back_what_it_wrote_and_checks_ranges_through_pread() {
        direct_file_round_trip("direct-pread", IoEngine::Pread);
    }

    /// io_uring where this kernel allows it (the engine `DirectFile::open` picks), else the
    /// fallback, which must then say why.
    #[test]
    fn a_direct_file_reads_back_what_it_wrote_through_the_best_engine() {
        let (engine, why) = IoEngine::best();
        assert_eq!(engine == IoEngine::Pread, why.is_some(), "{why:?}");
        eprintln!("best I/O engine here: {} {why:?}", engine.name());
        direct_file_round_trip("direct-best", engine);
    }

    fn direct_file_round_trip(name: &str, engine: IoEngine) {
        let path = temp_path(name);
        let len = 1 << 20;
        let medium = DirectFile::open_with(&path, len, engine).unwrap();
        assert_eq!(medium.io_engine(), engine.name());
        assert_eq!(medium.len_bytes(), len);
        assert!(medium.is_direct(), "ext4 supports O_DIRECT");
        let block = medium.block_size_bytes();
        let mut data = AlignedBuf::zeroed(3 * block, block);
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        medium.write_at(block as u64, &data).unwrap();
        medium.persist(0, len).unwrap();
        let mut back = AlignedBuf::zeroed(3 * block, block);
        medium.read_at(block as u64, &mut back).unwrap();
        assert_eq!(&back[..], &data[..]);
        assert!(matches!(
            medium.read_at(len - block as u64, &mut back),
            Err(MediumError::OutOfRange { .. })
        ));
        assert!(matches!(
            medium.read_at(100, &mut back),
            Err(MediumError::Misaligned { .. })
        ));
        // Reads in the device's direct-I/O pieces (512 B on this machine's disks, at most a
        // block): one piece from inside the second block written, through both read calls.
        let piece = medium.read_align_bytes();
        assert!(piece.is_power_of_two() && (512..=block).contains(&piece));
        let at = block + block / piece / 2 * piece;
        let mut small = AlignedBuf::zeroed(piece, piece);
        medium.read_at(at as u64, &mut small).unwrap();
        assert_eq!(&small[..], &data[at - block..at - block + piece]);
        let mut many = [(at as u64, &mut small[..])];
        assert!(medium.read_many(&mut many).iter().all(Result::is_ok));
        assert_eq!(&small[..], &data[at - block..at - block + piece]);
        assert!(matches!(
            medium.read_at(at as u64 + 64, &mut small),
            Err(MediumError::Misaligned { .. })
        ));
        medium.discard(block as u64, block as u64).unwrap();
        medium.read_at(block as u64, &mut back).unwrap();
        assert!(
            back[..block].iter().all(|&b| b == 0),
            "a discarded block reads zero"
        );
        assert_eq!(&back[block..], &data[block..]);
        // Locked: a second open of the same file is refused.
        assert!(DirectFile::open_with(&path, len, engine).is_err());
        drop(medium);
        // Reopened: the bytes are there, the length kept.
        let medium = DirectFile::open_with(&path, len, engine).unwrap();
        medium
            .read_at(2 * block as u64, &mut back[..block])
            .unwrap();
        assert_eq!(&back[..block], &data[block..2 * block]);
        drop(medium);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_batch_of_reads_returns_each_its_own_bytes_through_pread() {
        batch_reads("batch-pread", IoEngine::Pread);
    }

    #[test]
    fn a_batch_of_reads_returns_each_its_own_bytes_through_the_best_engine() {
        batch_reads("batch-best", IoEngine::best().0);
    }

    /// More reads than one io_uring submission holds, of varied lengths, with an out-of-range
    /// and a misaligned one among them: each valid read gets exactly its own bytes, each bad
    /// one its own error, in order.
    fn batch_reads(name: &str, engine: IoEngine) {
        let path = temp_path(name);
        let len: u64 = 4 << 20;
        let medium = DirectFile::open_with(&path, len, engine).unwrap();
        let block = medium.block_size_bytes();
        let blocks = len as usize / block;
        let mut data = AlignedBuf::zeroed(len as usize, block);
        for (i, chunk) in data.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&(i as u64).to_le_bytes());
        }
        medium.write_at(0, &data).unwrap();
        let wanted: Vec<(u64, usize)> = (0..150usize)
            .map(|i| {
                let at = (i * 37) % (blocks - 3);
                ((at * block) as u64, (1 + i % 3) * block)
            })
            .collect();
        let mut bufs: Vec<AlignedBuf> = wanted
            .iter()
            .map(|&(_, n)| AlignedBuf::zeroed(n, block))
            .collect();
        let mut past_end = AlignedBuf::zeroed(2 * block, block);
        let mut misaligned = AlignedBuf::zeroed(block, block);
        let mut reads: Vec<(u64, &mut [u8])> = wanted
            .iter()
            .zip(bufs.iter_mut())
            .map(|(&(offset, _), buf)| (offset, &mut buf[..]))
            .collect();
        reads.insert(70, (len - block as u64, &mut past_end[..]));
        reads.insert(3, (100, &mut misaligned[..]));
        let results = medium.read_many(&mut reads);
        assert_eq!(results.len(), wanted.len() + 2);
        assert!(matches!(results[3], Err(MediumError::Misaligned { .. })));
        assert!(matches!(results[71], Err(MediumError::OutOfRange { .. })));
        let good: Vec<_> = results
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != 3 && i != 71)
            .map(|(_, r)| r.clone())
            .collect();
        drop(reads);
        for ((&(offset, n), buf), result) in wanted.iter().zip(&bufs).zip(good) {
            result.unwrap();
            let at = offset as usize;
            assert_eq!(&buf[..], &data[at..at + n], "read at {offset}");
        }
        drop(medium);
        let _ = std::fs::remove_file(&path);
    }

    /// A worker's own ring: each read comes back with what it was queued with and exactly its
    /// bytes; a read past the end comes back short (an error), a misaligned one on an O_DIRECT
    /// file an error, never bytes; a full ring refuses and hands the caller's value back; a
    /// recycled buffer is reused without its old bytes showing; a ring dropped with reads in
    /// flight waits for them.
    #[test]
    fn a_read_ring_returns_each_read_its_bytes_and_bad_reads_as_errors() {
        read_ring_returns_each_read_its_bytes("read-ring", |file| {
            let ring = crate::ReadRing::new(8, file).unwrap();
            assert!(!ring.is_kernel_polled());
            ring
        });
    }

    /// The same with a kernel thread issuing the reads (`SQPOLL`): the worker's submit is then
    /// no system call while the thread is awake, and it must not lose or mix up any read. An
    /// idle time of 1 ms makes the thread fall asleep between the test's batches too, so a
    /// submit that must wake it is exercised.
    #[test]
    fn a_kernel_polled_read_ring_returns_each_read_its_bytes_and_bad_reads_as_errors() {
        read_ring_returns_each_read_its_bytes("read-ring-polled", |file| {
            let ring = crate::ReadRing::kernel_polled(8, file, 1).unwrap();
            assert!(ring.is_kernel_polled());
            std::thread::sleep(std::time::Duration::from_millis(20));
            ring
        });
    }

    fn read_ring_returns_each_read_its_bytes(
        name: &str,
        new_ring: impl Fn(std::os::fd::OwnedFd) -> crate::ReadRing<&'static str>,
    ) {
        let path = temp_path(name);
        let len: u64 = 1 << 20;
        let medium = DirectFile::open_with(&path, len, IoEngine::best().0).unwrap();
        let Some(file) = medium.read_file() else {
            assert_eq!(
                IoEngine::best().0,
                IoEngine::Pread,
                "no descriptor only without io_uring"
            );
            return;
        };
        let block = medium.block_size_bytes();
        let mut data = AlignedBuf::zeroed(len as usize, block);
        for (i, chunk) in data.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&(i as u64).to_le_bytes());
        }
        medium.write_at(0, &data).unwrap();
        let mut ring = new_ring(file);
        let capacity = ring.capacity();
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            let offset = (i * 3 * block) as u64;
            assert!(ring
                .queue_read(offset, (i + 1) * block, block, name)
                .is_ok());
        }
        assert!(ring
            .queue_read(len - block as u64, 2 * block, block, "past-end")
            .is_ok());
        assert!(ring.queue_read(100, block, block, "misaligned").is_ok());
        // A read in the device's pieces (512 B here) into a buffer aligned to a whole block.
        let piece = medium.read_align_bytes();
        assert!(ring
            .queue_read(5 * piece as u64, piece, block, "piece")
            .is_ok());
        while ring.in_flight() < capacity {
            assert!(ring.queue_read(0, block, block, "filler").is_ok());
        }
        assert_eq!(ring.queue_read(0, block, block, "refused"), Err("refused"));
        ring.submit().unwrap();
        let mut done = Vec::new();
        while ring.in_flight() > 0 {
            ring.complete(&mut done);
            std::thread::yield_now();
        }
        assert_eq!(done.len(), capacity);
        for (name, result) in done {
            match name {
                "a" | "b" | "c" => {
                    let i = (name.as_bytes()[0] - b'a') as usize;
                    let at = i * 3 * block;
                    let buf = result.unwrap();
                    assert_eq!(&buf[..], &data[at..at + (i + 1) * block], "{name}");
                }
                "piece" => {
                    let piece = medium.read_align_bytes();
                    let buf = result.unwrap();
                    assert_eq!(&buf[..], &data[5 * piece..6 * piece], "{name}");
                }
                "past-end" | "misaligned" => assert!(result.is_err(), "{name}: {result:?}"),
                _ => assert_eq!(&result.unwrap()[..], &data[..block]),
            }
        }
        // A recycled buffer serves a later read (no allocation) with that read's bytes only:
        // old bytes never show, and a short read into it is still an error. (A polling kernel
        // thread has fallen asleep by now: the submit wakes it.)
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut stale = AlignedBuf::zeroed(2 * block, block);
        stale.fill(0xEE);
        let stale_at = stale.as_ptr();
        ring.recycle(stale);
        assert!(ring
            .queue_read(7 * block as u64, block, block, "reused")
            .is_ok());
        let mut stale = AlignedBuf::zeroed(2 * block, block);
        stale.fill(0xEE);
        ring.recycle(stale);
        assert!(ring
            .queue_read(len - block as u64, 2 * block, block, "past-end")
            .is_ok());
        ring.submit().unwrap();
        let mut done = Vec::new();
        while ring.in_flight() > 0 {
            ring.complete(&mut done);
            std::thread::yield_now();
        }
        for (name, result) in done {
            if name == "reused" {
                let buf = result.unwrap();
                assert_eq!(buf.as_ptr(), stale_at, "the recycled buffer was used");
                assert_eq!(&buf[..], &data[7 * block..8 * block]);
            } else {
                assert!(result.is_err(), "{name}: {result:?}");
            }
        }
        // Dropped with reads in flight: it waits for them (no use of freed buffers).
        for _ in 0..capacity {
            assert!(ring.queue_read(0, block, block, "late").is_ok());
        }
        ring.submit().unwrap();
        drop(ring);
        drop(medium);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_power_cut_keeps_persisted_sectors_and_any_subset_of_the_rest() {
        let medium = SimulatedMedium::new(MemoryMedium::new(8192, 512), Faults::default());
        medium.write_at(0, &[1u8; 1024]).unwrap();
        medium.persist(0, 1024).unwrap();
        medium.write_at(0, &[2u8; 2048]).unwrap(); // four sectors, none persisted
        assert_eq!(medium.unpersisted_sectors(), 4);
        let none = medium.crash_image(&mut |_| false);
        assert!(none[..1024].iter().all(|&b| b == 1), "persisted kept");
        assert!(none[1024..2048].iter().all(|&b| b == 0), "unpersisted lost");
        // A torn write: its first and third sectors reached the media, the others not.
        let torn = medium.crash_image(&mut |sector| sector % 2 == 0);
        assert!(torn[..SECTOR_SIZE_BYTES].iter().all(|&b| b == 2));
        assert!(torn[SECTOR_SIZE_BYTES..1024].iter().all(|&b| b == 1));
        assert!(torn[1024..1536].iter().all(|&b| b == 2));
        assert!(torn[1536..2048].iter().all(|&b| b == 0));
        medium.persist(0, 8192).unwrap();
        assert_eq!(medium.unpersisted_sectors(), 0);
        assert!(medium.crash_image(&mut |_| false)[..2048]
            .iter()
            .all(|&b| b == 2));
    }

    #[test]
    fn faults_fail_the_nth_write_and_persist_and_every_later_one() {
        let faults = Faults {
            fail_write_from: Some(3),
            fail_persist_from: Some(2),
            ..Faults::default()
        };
        let medium = SimulatedMedium::new(MemoryMedium::new(4096, 512), faults);
        medium.write_at(0, &[1; 512]).unwrap();
        medium.write_at(512, &[1; 512]).unwrap();
        assert!(medium.write_at(1024, &[1; 512]).is_err());
        assert!(medium.write_at(1536, &[1; 512]).is_err());
        medium.persist(0, 4096).unwrap();
        assert!(medium.persist(0, 4096).is_err());
    }
}
