//! Goal: etcd 3.7's `KV.RangeStream` answers as etcd 3.7.3 answers, for
//! etcd's own Go client (v3.7.3): merged as the client merges it, a
//! stream equals Range; and across a table of ranges (limits, revisions,
//! keys-only, count-only, sort targets and orders, revision filters,
//! compacted and future revisions, an empty key, a permitted and a denied
//! range under auth) kv-server's answers and errors are etcd's. Ranges go
//! in more than one chunk, as etcd's do.
//!
//! Method: `tests/go/ranges` is a Go program using etcd's client v3.7.3.
//! It makes the same history on a fresh etcd 3.7.3 single member and a
//! fresh kv-server single member (puts, an overwrite, a delete and
//! re-create, a leased key, a physical compaction), then asks both every
//! range by Range and by RangeStream and compares, with only the header's
//! cluster, member and term ids set aside. It prints one line per
//! mismatch and ends with `cases=N mismatches=M`. The one place etcd
//! 3.7.3's stream differs from its own Range (a sort target with no order
//! over more than one chunk: it sorts each chunk) is compared with etcd's
//! Range answer instead.
//!
//! Big and interrupted streams, on both servers, over 80,000 keys of a
//! KiB (far more than either server reads ahead): whole and limited
//! streams, each equal to Range (many chunks, and many of kv-server's
//! windows); streams the client cancels after two chunks; then a stream
//! a physical compaction past its revision overtakes after its first
//! chunk. Both must end alike (the server counting every key after the
//! cancels, the overtaken stream ended by the same error), and
//! kv-server's RSS must peak no higher above where the streams found it
//! than a stream may hold ([`STREAM_GROWTH_MAX`]).
//!
//! Needs etcd 3.7.3 (`ETCD37_BIN`) and Go (CI installs both).

mod common;

use std::time::Duration;

/// The program's requests each time out within 60 s; this bounds the
/// whole run from outside.
const RUN_WITHIN: Duration = Duration::from_secs(120);
/// Cases the program compares: keep in step with `cases()` in main.go,
/// so that a table cut short cannot pass.
const CASES: usize = 44;

/// A fresh etcd 3.7.3 member and a fresh kv-server member, and the data
/// directories they run on (dropped after them).
struct Pair {
    etcd: common::Cluster,
    kv_server: common::Cluster,
    _dirs: [tempfile::TempDir; 2],
}

impl Pair {
    fn start(etcd_base: u16, kv_base: u16) -> Pair {
        let dirs = [(); 2].map(|_| tempfile::tempdir().expect("tempdir"));
        let etcd_37 = common::etcd_tool("ETCD37_BIN", "etcd-3.7.3");
        Pair {
            etcd: common::Cluster::start_members(&etcd_37, dirs[0].path(), etcd_base, 1, &[]),
            kv_server: common::Cluster::start_members(&common::kv_server(), dirs[1].path(), kv_base, 1, &[]),
            _dirs: dirs,
        }
    }

    fn endpoints(&self) -> [String; 2] {
        [self.etcd.members[0].endpoint(), self.kv_server.members[0].endpoint()]
    }
}

/// Runs the program with `args`; it must succeed. Its stdout, and all it
/// printed (for failure messages).
fn run(program: &std::path::Path, args: &[&str]) -> (String, String) {
    let output = common::run_within(program, args, RUN_WITHIN);
    let printed = common::text(&output);
    assert!(output.status.success(), "{}\n{printed}", output.status);
    (String::from_utf8_lossy(&output.stdout).to_string(), printed)
}

#[test]
fn range_stream_answers_as_etcd_3_7() {
    let program = common::go_program("ranges");
    let pair = Pair::start(26379, 26479);
    let endpoints = pair.endpoints();
    let (stdout, printed) = run(&program, &["compare", &endpoints[0], &endpoints[1]]);
    assert_eq!(
        stdout.lines().last(),
        Some(format!("cases={CASES} mismatches=0").as_str()),
        "{printed}"
    );
}

/// How far above where they found it kv-server's RSS may peak during the
/// interrupted streams: the 64 MiB a member may grow by while serving a
/// stream (two windows of at most 16 MiB and the chunks queued behind
/// them, `api/range_stream.rs`).
const STREAM_GROWTH_MAX: i64 = 64 << 20;

#[test]
fn interrupted_streams_end_as_etcd_3_7s_within_their_memory() {
    let program = common::go_program("ranges");
    let pair = Pair::start(26879, 26979);
    let endpoints = pair.endpoints();
    for endpoint in &endpoints {
        run(&program, &["fill", endpoint]);
        let (_, printed) = run(&program, &["streams", endpoint]);
        assert_eq!(printed.trim(), "3 streams equal their ranges", "{endpoint}");
    }
    // The peak from here on: the kernel's high-water mark, reset.
    let pid = pair.kv_server.members[0].pid().expect("kv-server runs");
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the high-water mark");
    let before = common::status_bytes(pid, "VmRSS:");
    let (stdout, printed) = run(&program, &["interrupt", &endpoints[0], &endpoints[1]]);
    assert_eq!(
        stdout.lines().last(),
        Some("interrupted streams end alike"),
        "{printed}"
    );
    assert!(
        stdout.contains(
            "then count 80000; overtaken stream ended with etcdserver: mvcc: required revision has been compacted"
        ),
        "the count and the compaction's error: {stdout}"
    );
    let growth = common::status_bytes(pid, "VmHWM:") - before;
    eprintln!(
        "kv-server's RSS peaked {} MiB above where the streams found it",
        growth >> 20
    );
    assert!(
        growth <= STREAM_GROWTH_MAX,
        "kv-server's RSS peaked {growth} bytes above where the interrupted streams found it"
    );
}
