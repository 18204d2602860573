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
//! chunk. Both must end alike (the server counting
//! every key after the cancels, the overtaken stream ended by the same
//! error), and kv-server's RSS must peak no higher above where the
//! streams found it than a stream may hold ([`STREAM_GROWTH_MAX`]).
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

#[test]
fn range_stream_answers_as_etcd_3_7() {
    let program = common::go_program("ranges");
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let kv_dir = tempfile::tempdir().expect("tempdir");
    let etcd_37 = common::etcd_tool("ETCD37_BIN", "etcd-3.7.3");
    let etcd = common::Cluster::start_members(&etcd_37, etcd_dir.path(), 26379, 1, &[]);
    let kv_server = common::Cluster::start_members(&common::kv_server(), kv_dir.path(), 26479, 1, &[]);

    let endpoints = [etcd.members[0].endpoint(), kv_server.members[0].endpoint()];
    let output = common::run_within(&program, &["compare", &endpoints[0], &endpoints[1]], RUN_WITHIN);
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\n{stdout}{stderr}", output.status);
    assert_eq!(
        stdout.lines().last(),
        Some(format!("cases={CASES} mismatches=0").as_str()),
        "{stdout}{stderr}"
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
    let etcd_dir = tempfile::tempdir().expect("tempdir");
    let kv_dir = tempfile::tempdir().expect("tempdir");
    let etcd_37 = common::etcd_tool("ETCD37_BIN", "etcd-3.7.3");
    let etcd = common::Cluster::start_members(&etcd_37, etcd_dir.path(), 26879, 1, &[]);
    let kv_server = common::Cluster::start_members(&common::kv_server(), kv_dir.path(), 26979, 1, &[]);
    let endpoints = [etcd.members[0].endpoint(), kv_server.members[0].endpoint()];
    for endpoint in &endpoints {
        let filled = common::run_within(&program, &["fill", endpoint], RUN_WITHIN);
        assert!(filled.status.success(), "{}", common::text(&filled));
        let checked = common::run_within(&program, &["streams", endpoint], RUN_WITHIN);
        assert!(checked.status.success(), "{endpoint}: {}", common::text(&checked));
        assert_eq!(common::text(&checked).trim(), "3 streams equal their ranges");
    }
    // The peak from here on: the kernel's high-water mark, reset.
    let pid = kv_server.members[0].pid().expect("kv-server runs");
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the high-water mark");
    let before = status_bytes(pid, "VmRSS:");
    let output = common::run_within(&program, &["interrupt", &endpoints[0], &endpoints[1]], RUN_WITHIN);
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{}\n{stdout}{stderr}", output.status);
    assert_eq!(
        stdout.lines().last(),
        Some("interrupted streams end alike"),
        "{stdout}{stderr}"
    );
    assert!(
        stdout.contains(
            "then count 80000; overtaken stream ended with etcdserver: mvcc: required revision has been compacted"
        ),
        "the count and the compaction's error: {stdout}"
    );
    let growth = status_bytes(pid, "VmHWM:") - before;
    eprintln!(
        "kv-server's RSS peaked {} MiB above where the streams found it",
        growth >> 20
    );
    assert!(
        growth <= STREAM_GROWTH_MAX,
        "kv-server's RSS peaked {growth} bytes above where the interrupted streams found it"
    );
}

/// A `/proc/PID/status` line in bytes: VmRSS, or VmHWM (the peak).
fn status_bytes(pid: u32, line: &str) -> i64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("member status");
    let kib: i64 = status
        .lines()
        .find_map(|text| text.strip_prefix(line))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .expect(line);
    kib * 1024
}
