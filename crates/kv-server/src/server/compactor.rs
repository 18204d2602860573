//! Auto-compaction, on etcd 3.5.17's schedule (its `v3compactor`), for
//! the users with no kube-apiserver to compact for them (Milvus, Mimir,
//! etcd-druid): `--auto-compaction-mode` and `--auto-compaction-retention`.
//!
//! Every member runs the loop; only the leader compacts (a follower's
//! loop keeps sampling, as etcd's paused compactor does), so compaction
//! goes on across leader changes. A compaction is an ordinary replicated
//! Compact at a past revision; one at or below the compact revision
//! counts as done, as etcd counts `ErrCompacted`.
//! - **periodic**, retention P: the revision is sampled every P/10 (P
//!   capped at an hour), the last P/(P/10)+1 samples kept; P after the
//!   start, and then every P (every hour for P over an hour) after the
//!   last success, the oldest sample is compacted.
//! - **revision**, retention N: every five minutes, the revision N below
//!   the current one is compacted, unless it is the one compacted last.
//!
//! etcd's log lines come with each: "starting auto periodic compaction",
//! "completed …", "failed …" (and the revision ones), with its fields.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, RequestError};
use crate::logging::go_duration;
use crate::member::core::Member;
use crate::proto::etcdserverpb as pb;
use crate::proto::kvserverpb::raft_request;

/// etcd's periodic compactor samples ten times a period.
const SAMPLES_PER_PERIOD: u32 = 10;
/// The longest interval between periodic compactions, and the period the
/// sampling interval is taken from when the retention is longer.
const HOUR: Duration = Duration::from_secs(3600);
/// How often revision mode checks, etcd's `revInterval`.
pub const REVISION_CHECK_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// The environment variable that shortens [`REVISION_CHECK_INTERVAL`] (a
/// Go duration), for tests that cannot wait five minutes.
pub const REVISION_CHECK_INTERVAL_VARIABLE: &str = "KV_SERVER_REVISION_COMPACTION_INTERVAL";

/// What the two flags ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    Off,
    Periodic(Duration),
    Revisions(i64),
}

/// The flags read as etcd reads them: a whole number is hours (periodic)
/// or a count (revision), anything else a Go duration (in revision mode
/// its nanoseconds count, as etcd counts them); 0 turns compaction off.
/// Errors are etcd's texts.
pub fn retention(mode: &str, retention: &str) -> Result<Retention, Error> {
    let flag = |reason: String| Error::Flag {
        flag: "auto-compaction-retention",
        reason,
    };
    if !matches!(mode, "" | "periodic" | "revision") {
        return Err(Error::Flag {
            flag: "auto-compaction-mode",
            reason: format!("unknown auto-compaction-mode {mode:?}"),
        });
    }
    let amount = match retention.parse::<i64>() {
        Ok(whole) if whole >= 0 => match mode {
            "periodic" => Duration::from_secs(whole as u64 * 3600).as_nanos(),
            _ => whole as u128,
        },
        _ => crate::flags::go_syntax::parse_duration(retention)
            .map_err(|error| flag(format!("error parsing CompactionRetention: {error}")))?
            .as_nanos(),
    };
    if amount == 0 {
        return Ok(Retention::Off);
    }
    Ok(match mode {
        "periodic" => Retention::Periodic(Duration::from_nanos(amount as u64)),
        "revision" => Retention::Revisions(amount.min(i64::MAX as u128) as i64),
        // etcd 3.5: a whole number with no mode leaves compaction off;
        // a duration is refused.
        _ if retention.parse::<i64>().is_ok() => Retention::Off,
        _ => return Err(flag("unsupported compaction mode ".to_string())),
    })
}

/// Starts the compactor the flags ask for, if any.
pub fn spawn(member: Arc<Member>, retention: Retention) {
    match retention {
        Retention::Off => {}
        Retention::Periodic(period) => {
            tokio::spawn(periodic(member, period));
        }
        Retention::Revisions(keep) => {
            let every = std::env::var(REVISION_CHECK_INTERVAL_VARIABLE)
                .ok()
                .and_then(|text| crate::flags::go_syntax::parse_duration(&text).ok())
                .filter(|every| !every.is_zero())
                .unwrap_or(REVISION_CHECK_INTERVAL);
            tokio::spawn(revisions(member, keep, every));
        }
    }
}

fn leads(member: &Member) -> bool {
    member.leader() == member.member_id()
}

/// A replicated Compact at `revision`: done, or why not. One at or below
/// the compact revision is done already.
async fn compact(member: &Member, revision: i64) -> Result<(), RequestError> {
    let request = raft_request::Request::Compaction(pb::CompactionRequest {
        revision,
        physical: false,
    });
    match member.propose(request).await {
        Ok(_) | Err(RequestError::Store(mvcc::Error::Compacted)) => Ok(()),
        Err(error) => Err(error),
    }
}

/// etcd's periodic compactor (see the module's doc).
async fn periodic(member: Arc<Member>, period: Duration) {
    let compact_interval = period.min(HOUR);
    let retry_interval = compact_interval / SAMPLES_PER_PERIOD;
    let retentions = (period.as_nanos() / retry_interval.as_nanos().max(1)) as usize + 1;
    let mut samples = VecDeque::with_capacity(retentions + 1);
    let mut last_success = Instant::now();
    let mut base_interval = period;
    loop {
        samples.push_back(member.current_revision());
        if samples.len() > retentions {
            samples.pop_front();
        }
        tokio::time::sleep(retry_interval).await;
        if !leads(&member) || last_success.elapsed() < base_interval {
            continue;
        }
        base_interval = compact_interval;
        let revision = samples[0];
        let period_text = go_duration(period);
        tracing::info!(revision, "compact-period" = %period_text, "starting auto periodic compaction");
        let started = Instant::now();
        match compact(&member, revision).await {
            Ok(()) => {
                let took = go_duration(started.elapsed());
                tracing::info!(
                    revision,
                    "compact-period" = %period_text,
                    took = %took,
                    "completed auto periodic compaction"
                );
                last_success = Instant::now();
            }
            Err(error) => tracing::warn!(
                revision,
                "compact-period" = %period_text,
                "retry-interval" = %go_duration(retry_interval),
                %error,
                "failed auto periodic compaction"
            ),
        }
    }
}

/// etcd's revision compactor (see the module's doc); `every` is its
/// five-minute check, shortened only by tests.
async fn revisions(member: Arc<Member>, keep: i64, every: Duration) {
    let mut last = 0;
    loop {
        tokio::time::sleep(every).await;
        if !leads(&member) {
            continue;
        }
        let revision = member.current_revision() - keep;
        if revision <= 0 || revision == last {
            continue;
        }
        tracing::info!(
            revision,
            "revision-compaction-retention" = keep,
            "starting auto revision compaction"
        );
        let started = Instant::now();
        match compact(&member, revision).await {
            Ok(()) => {
                last = revision;
                tracing::info!(
                    revision,
                    "revision-compaction-retention" = keep,
                    took = %go_duration(started.elapsed()),
                    "completed auto revision compaction"
                );
            }
            Err(error) => tracing::warn!(
                revision,
                "revision-compaction-retention" = keep,
                "retry-interval" = %go_duration(every),
                %error,
                "failed auto revision compaction"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retentions_read_as_etcds() {
        assert_eq!(retention("periodic", "0").unwrap(), Retention::Off);
        assert_eq!(retention("periodic", "1").unwrap(), Retention::Periodic(HOUR));
        assert_eq!(
            retention("periodic", "5s").unwrap(),
            Retention::Periodic(Duration::from_secs(5))
        );
        assert_eq!(retention("revision", "1000").unwrap(), Retention::Revisions(1000));
        assert_eq!(retention("revision", "3ns").unwrap(), Retention::Revisions(3));
        assert_eq!(retention("", "5").unwrap(), Retention::Off);
        let refused = |mode, text| retention(mode, text).unwrap_err().to_string();
        assert_eq!(
            refused("periodic", "abc"),
            "--auto-compaction-retention: error parsing CompactionRetention: time: invalid duration \"abc\""
        );
        assert_eq!(
            refused("hourly", "1"),
            "--auto-compaction-mode: unknown auto-compaction-mode \"hourly\""
        );
        assert_eq!(
            refused("", "5m"),
            "--auto-compaction-retention: unsupported compaction mode "
        );
    }
}
