//! Memory cost of the in-memory key index at 1M keys.
//!
//! Not a timing: a counting global allocator measures the heap bytes the
//! index holds after 1M keys are put once (bytes per key, which includes
//! the key's own bytes), then after each key gets more versions (bytes per
//! version). etcd documents about 120 bytes per key plus 30 per version for
//! its index; this prints our figures next to those.
//!
//! Two key shapes: 8 bytes (etcd's benchmark tool) and 48 bytes (a
//! Kubernetes-style `/registry/pods/<namespace>/<name>` key). Two insert
//! orders: ascending keys, and the order a rebuild sees after random puts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use mvcc::index::TreeIndex;
use mvcc::Revision;

struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged and only
// counts the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: u64 = 1_000_000;

fn live() -> isize {
    LIVE_BYTES.load(Ordering::Relaxed)
}

/// A fixed pseudo-random permutation of 0..KEYS (multiplication by an odd
/// constant modulo a power of two is a bijection; values past KEYS are skipped).
fn shuffled() -> impl Iterator<Item = u64> {
    let modulus = KEYS.next_power_of_two();
    (0..modulus)
        .map(move |i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % modulus)
        .filter(|&i| i < KEYS)
}

/// Resident set size from /proc, in bytes: what the process really holds,
/// allocator overhead (chunk headers, rounding) included.
fn rss_bytes() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .expect("rss field")
        .parse()
        .expect("number");
    pages * 4096.0
}

fn measure(label: &str, key: impl Fn(u64) -> Vec<u8>, order: &[u64], key_bytes: usize) {
    let before = live();
    let rss_before = rss_bytes();
    let mut index = TreeIndex::default();
    let mut main = 1;
    for &i in order {
        main += 1;
        index.put(&key(i), Revision::new(main, 0));
    }
    let per_key = (live() - before) as f64 / KEYS as f64;
    let rss_per_key = (rss_bytes() - rss_before) / KEYS as f64;
    let mut figures = vec![format!("{per_key:.1} B/key ({rss_per_key:.1} in RSS)")];
    let mut previous = live();
    for versions in 2..=4 {
        for &i in order {
            main += 1;
            index.put(&key(i), Revision::new(main, 0));
        }
        let per_version = (live() - previous) as f64 / KEYS as f64;
        figures.push(format!("version {versions}: +{per_version:.1} B"));
        previous = live();
    }
    let total_per_version = (live() - before) as f64 / KEYS as f64 - per_key;
    let rss_per_version = ((rss_bytes() - rss_before) / KEYS as f64 - rss_per_key) / 3.0;
    println!(
        "{label:<16} key {key_bytes:>2} B: {}; versions 2-4 average {:.1} B/version ({rss_per_version:.1} in RSS)",
        figures.join(", "),
        total_per_version / 3.0
    );
    assert_eq!(index.len() as u64, KEYS);
}

const CASE_VARIABLE: &str = "INDEX_MEMORY_CASE";

fn main() {
    // Each case runs in a fresh child process, so that RSS growth is not
    // hidden by memory an earlier case freed. `cargo bench` passes
    // `--bench`; nothing here is timed, so arguments are ignored.
    let Ok(case) = std::env::var(CASE_VARIABLE) else {
        println!("index memory at {KEYS} keys (etcd's documented figure: 120 B/key + 30 B/version)");
        for case in 0..4 {
            let output = std::process::Command::new(std::env::current_exe().expect("current exe"))
                .env(CASE_VARIABLE, case.to_string())
                .output()
                .expect("run case");
            assert!(
                output.status.success(),
                "case {case} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            print!("{}", String::from_utf8_lossy(&output.stdout));
        }
        return;
    };
    let short = |i: u64| format!("{i:08}").into_bytes();
    let long = |i: u64| format!("/registry/pods/namespace-{:04}/pod-{i:016}", i % 1000).into_bytes();
    let ascending = || (0..KEYS).collect::<Vec<u64>>();
    let random = || {
        let order: Vec<u64> = shuffled().collect();
        assert_eq!(order.len() as u64, KEYS);
        order
    };
    match case.as_str() {
        "0" => measure("ascending keys", short, &ascending(), short(0).len()),
        "1" => measure("random order", short, &random(), short(0).len()),
        "2" => measure("ascending keys", long, &ascending(), long(0).len()),
        "3" => measure("random order", long, &random(), long(0).len()),
        other => panic!("unknown case {other}"),
    }
}
