//! Pinning the calling thread to one CPU, so the server and the generator do not share a core.
//!
//! This is the crate's only `unsafe` code: one `sched_setaffinity` call through `libc`.

use std::io;

/// Restricts the calling thread to CPU `cpu`.
///
/// # Errors
/// When the CPU does not exist or is outside this process's allowed set.
#[allow(unsafe_code)]
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    let set_bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
    if cpu >= set_bits {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "CPU index too large",
        ));
    }
    // SAFETY: `cpu_set_t` is a plain bit array for which all-zero is a valid (empty) value;
    // `CPU_SET` is called with `cpu < 8 * size_of::<cpu_set_t>()`, checked above, so it stays
    // inside `set`; `sched_setaffinity` only reads `size_of::<cpu_set_t>()` bytes of `set`,
    // which lives on this stack frame for the whole call. Pid 0 means the calling thread.
    let result = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_to_cpu_zero_and_rejects_absurd_cpus() {
        // A fresh thread, so the test runner's threads keep their affinity.
        std::thread::spawn(|| {
            pin_current_thread(0).unwrap();
            assert!(pin_current_thread(1 << 20).is_err());
        })
        .join()
        .unwrap();
    }
}
