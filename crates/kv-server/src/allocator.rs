//! The member's allocator settings. The binary uses mimalloc (see
//! `main.rs`): under etcd's put benchmark glibc's malloc took a large
//! share of the leader's CPU, and mimalloc gave it back.
//!
//! With mimalloc's defaults a loaded leader's RSS was far above glibc's:
//! arenas are committed eagerly, which lets the kernel back them with
//! transparent huge pages, and freed memory is kept for a second before
//! it is returned. Built with mimalloc's `no_thp` feature and with the two
//! options below, it is back to glibc's at the same throughput. The
//! figures: `docs/measurements.md`.
//!
//! Freed memory is returned after [`PURGE_DELAY_MS`], not at once: at
//! once, pages that a loaded member frees and takes again within
//! milliseconds (answers, watch responses, request buffers) went back to
//! the kernel and were faulted in and zeroed again, 4–8 % of the members'
//! CPU in the put, range and watch profiles (`docs/benchmarks/history.md`,
//! sixth round).

/// `mi_option_arena_eager_commit` in mimalloc v3's `mi_option_t`.
const ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
/// `mi_option_purge_delay` in mimalloc v3's `mi_option_t`.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays before it is returned to the kernel, in
/// milliseconds: long enough that a page freed and taken again under
/// load (most are, within a few milliseconds) is not returned and faulted
/// in again; short enough that a member whose load stops gives its
/// memory back at once on any human scale (mimalloc's own default is a
/// second). The trade measured: `docs/benchmarks/history.md`, sixth
/// round.
pub const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Commit arena memory only when used, and return freed memory after
/// [`PURGE_DELAY_MS`].
pub fn tune() {
    // SAFETY: mi_option_set only stores an integer in mimalloc's option
    // table; both option numbers are checked against their documented
    // defaults in the test below.
    unsafe {
        libmimalloc_sys::mi_option_set(ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: the option numbers name the options meant. Method: read each
    // one before changing it; mimalloc v3 (the version built) documents
    // arena_eager_commit's default as 2 and purge_delay's as 1000 (ms).
    #[test]
    fn option_numbers_name_the_intended_options() {
        // SAFETY: reads an integer from mimalloc's option table.
        let (eager, delay) = unsafe {
            (
                libmimalloc_sys::mi_option_get(ARENA_EAGER_COMMIT),
                libmimalloc_sys::mi_option_get(PURGE_DELAY),
            )
        };
        assert_eq!((eager, delay), (2, 1000));
    }
}
