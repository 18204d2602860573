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
