//! The faults a seed injects while its clients run: every kind the
//! simulator knows, drawn one at a time at random intervals.
//!
//! - network: a partition (a minority cut off, or the leader's side),
//!   healed later; drops, duplicates and delays (which reorder);
//! - disk: slow syncs; a failed fdatasync (fatal to its member, which is
//!   restarted later); unsynced writes lost or torn at every crash; a
//!   flipped bit in a crashed member's synced log, which its restart must
//!   refuse (the member then stays down: an operator would rebuild it);
//! - process: a crash (at a random moment, or in the middle of a
//!   member's WAL sync), and a restart after a while; a pause of the whole
//!   member (a stopped process, a stalled machine);
//! - maintenance: a compaction, and a defragmentation;
//! - membership: a member replaced (`replace.rs`): the lost one if a flip
//!   cost the run a member, else one crashed for it.

use std::time::Duration;

use crate::harness::{Failure, NetFaults, Rng, SimCluster, StartError};

use crate::replace::{Progress, Replacement};

/// The longest span between two faults.
const SPAN_MAX_MS: u64 = 200;

/// The longest a crashed member stays down before the run restarts it.
const DOWN_MAX_MS: u64 = 600;

/// How long a crash meant for a member in the middle of a sync waits for
/// one to begin, in steps of [`SYNC_WAIT_STEP`].
const SYNC_WAIT_STEPS_MAX: u32 = 200;
const SYNC_WAIT_STEP: Duration = Duration::from_micros(100);

/// How soon a joining member that found no member to ask starts again.
const RETRY_JOIN_AFTER: Duration = Duration::from_millis(50);

/// Members replaced per run at most: each takes a second or more of the
/// run's 1.5 s under faults.
const REPLACEMENTS_MAX: u64 = 2;

/// The longest pause of a member: past its election timeout, so that the
/// others elect without it and it comes back to a newer term.
const PAUSE_MAX_MS: u64 = 400;

/// What the faults did, counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultLog {
    pub partitions: u64,
    pub net_changes: u64,
    pub crashes: u64,
    pub fsync_failures: u64,
    pub slow_disks: u64,
    pub flips: u64,
    /// Flips whose member refused to start, as it must.
    pub flips_detected: u64,
    /// Flips after which the member started: each one a failed seed.
    pub flips_undetected: Vec<String>,
    /// Restarts refused with no flip to explain it: each one a failed
    /// seed.
    pub restarts_refused: Vec<String>,
    pub compactions: u64,
    pub defrags: u64,
    pub pauses: u64,
    /// Members replaced: begun, their successor running, promoted to
    /// voter, and given up (with why).
    pub replacements: u64,
    pub replacements_started: u64,
    pub replacements_promoted: u64,
    pub replacements_abandoned: Vec<String>,
}

impl FaultLog {
    /// What the faults' own checks found wrong: flips not detected,
    /// restarts refused.
    pub fn problems(&self) -> impl Iterator<Item = String> + '_ {
        let flips = self.flips_undetected.iter().map(|flip| format!("undetected: {flip}"));
        flips.chain(
            self.restarts_refused
                .iter()
                .map(|why| format!("restart refused: {why}")),
        )
    }
}

/// A down member and when it comes back (`None`: never, its log is
/// corrupt).
struct Down {
    member: usize,
    back_at: Option<Duration>,
}

/// Injects faults into `cluster` for `span` of simulated time.
pub struct Faults {
    rng: Rng,
    down: Vec<Down>,
    /// Set by [`Faults::end`]: members come back at once.
    ending: bool,
    /// The replacement under way, if one is.
    replacing: Option<Replacement>,
    pub log: FaultLog,
}

impl Faults {
    pub fn new(rng: Rng) -> Faults {
        Faults {
            rng,
            down: Vec::new(),
            ending: false,
            replacing: None,
            log: FaultLog::default(),
        }
    }

    /// Runs the cluster for `span`, a fault between each stretch.
    pub async fn run(&mut self, cluster: &mut SimCluster, span: Duration) -> Result<(), Failure> {
        let end = cluster.elapsed() + span;
        while cluster.elapsed() < end {
            let stretch = Duration::from_millis(self.rng.between(5, SPAN_MAX_MS));
            cluster
                .run_for(stretch.min(end.saturating_sub(cluster.elapsed())))
                .await?;
            self.restart_due(cluster);
            self.inject(cluster).await?;
        }
        Ok(())
    }

    /// Heals the network, restores the disks, restarts every member that
    /// can start; from now on a member that stops comes back at once.
    pub fn end(&mut self, cluster: &mut SimCluster) {
        self.ending = true;
        cluster.heal();
        cluster.set_net_faults(NetFaults::default());
        for member in 0..cluster.size() {
            cluster.heal_sync_latency(member);
            cluster.mend_syncs(member);
        }
        for down in &mut self.down {
            if down.back_at.is_some() {
                down.back_at = Some(Duration::ZERO);
            }
        }
        self.restart_due(cluster);
    }

    /// Members that are down for good.
    pub fn lost_members(&self) -> Vec<usize> {
        self.down
            .iter()
            .filter(|d| d.back_at.is_none())
            .map(|d| d.member)
            .collect()
    }

    /// Restarts the members whose time down is over.
    pub fn restart_due(&mut self, cluster: &mut SimCluster) {
        let now = cluster.elapsed();
        let mut still = Vec::new();
        for down in std::mem::take(&mut self.down) {
            match down.back_at {
                Some(at) if at <= now => match cluster.restart(down.member) {
                    Ok(()) => {}
                    // A joining member with no one to ask yet asks again.
                    Err(StartError::NotJoinedYet(_)) => still.push(Down {
                        member: down.member,
                        back_at: Some(now + RETRY_JOIN_AFTER),
                    }),
                    Err(StartError::Refused(why)) => {
                        // Not after a flip (those never come back), so
                        // the member must start: keep it down and let the
                        // end's check find the gap.
                        self.log.restarts_refused.push(format!("member {}: {why}", down.member));
                        still.push(Down {
                            member: down.member,
                            back_at: None,
                        });
                    }
                },
                _ => still.push(down),
            }
        }
        self.advance_replacement(cluster, &mut still);
        let replaced = self.replacing.as_ref().filter(|r| r.holds_slot()).map(|r| r.member);
        // Members stopped by a fault of their own (a failed fsync) are
        // down without this log knowing: bring them back too.
        for member in 0..cluster.size() {
            let known = still.iter().any(|d| d.member == member) || replaced == Some(member);
            if !cluster.is_running(member) && !known {
                let back = match self.ending {
                    true => now,
                    false => now + Duration::from_millis(self.rng.between(10, DOWN_MAX_MS)),
                };
                still.push(Down {
                    member,
                    back_at: Some(back),
                });
            }
        }
        self.down = still;
    }

    /// Whether a replacement is under way.
    pub fn replacing(&self) -> bool {
        self.replacing.is_some()
    }

    /// Moves the replacement under way on; one given up leaves its member
    /// down for good (in `down`).
    fn advance_replacement(&mut self, cluster: &mut SimCluster, down: &mut Vec<Down>) {
        let Some(replacement) = self.replacing.as_mut() else {
            return;
        };
        let member = replacement.member;
        let was_started = cluster.is_running(member);
        match replacement.advance(cluster) {
            Progress::Going => {
                if !was_started && cluster.is_running(member) {
                    self.log.replacements_started += 1;
                }
                return;
            }
            Progress::Done { promoted } => {
                self.log.replacements_promoted += u64::from(promoted);
            }
            Progress::Abandoned(why) => {
                self.log.replacements_abandoned.push(format!("member {member}: {why}"));
                down.push(Down { member, back_at: None });
            }
        }
        self.replacing = None;
    }

    /// Begins replacing a member: the one a flip lost, else a running one,
    /// crashed for it.
    async fn replace(&mut self, cluster: &mut SimCluster) -> Result<(), Failure> {
        if self.replacing.is_some() || self.log.replacements >= REPLACEMENTS_MAX {
            return Ok(());
        }
        let member = match self.lost_members().first() {
            Some(&lost) => lost,
            // A member crashed for good, as a flip loses one: only once
            // every member has applied the last change (see `flip`).
            None if !cluster.membership_settled() => return Ok(()),
            None => match self.running(cluster) {
                Some(member) => {
                    cluster.crash(member).await?;
                    self.log.crashes += 1;
                    member
                }
                None => return Ok(()),
            },
        };
        self.down.retain(|d| d.member != member);
        self.replacing = Some(Replacement::begin(cluster, member));
        self.log.replacements += 1;
        Ok(())
    }

    fn running(&mut self, cluster: &SimCluster) -> Option<usize> {
        let running: Vec<usize> = (0..cluster.size()).filter(|&m| cluster.is_running(m)).collect();
        (!running.is_empty()).then(|| running[self.rng.below(running.len() as u64) as usize])
    }

    async fn inject(&mut self, cluster: &mut SimCluster) -> Result<(), Failure> {
        match self.rng.below(100) {
            kind @ 0..40 => self.network(cluster, kind),
            40..48 => {
                if let Some(member) = self.running(cluster) {
                    cluster.crash(member).await?;
                    self.down_until_later(cluster, member);
                    self.log.crashes += 1;
                }
            }
            48..55 => self.crash_in_sync(cluster).await?,
            55..63 => {
                if let Some(member) = self.running(cluster) {
                    cluster.fail_syncs(member);
                    self.log.fsync_failures += 1;
                }
            }
            63..73 => {
                if let Some(member) = self.running(cluster) {
                    let slow = Duration::from_millis(self.rng.between(1, 20));
                    cluster.set_sync_latency(member, slow / 4, slow);
                    self.log.slow_disks += 1;
                }
            }
            73..78 => self.flip(cluster).await?,
            78..88 => {
                if let Some(member) = self.running(cluster) {
                    let revision = cluster.current_revision(member).unwrap_or(0);
                    let back = self.rng.below(20) as i64;
                    if revision - back > 1 {
                        let clients = cluster.clients();
                        tokio::spawn(async move {
                            let _ = clients.compact(member, revision - back).await;
                        });
                        self.log.compactions += 1;
                    }
                }
            }
            88..92 => {
                if let Some(member) = self.running(cluster) {
                    if cluster.defragment(member).is_ok() {
                        self.log.defrags += 1;
                    }
                }
            }
            92..97 => {
                if let Some(member) = self.running(cluster) {
                    let span = Duration::from_millis(self.rng.between(10, PAUSE_MAX_MS));
                    cluster.pause(member, span);
                    self.log.pauses += 1;
                }
            }
            _ => self.replace(cluster).await?,
        }
        Ok(())
    }

    /// A network fault: a partition (`kind` below 15), a heal, or new
    /// drop, duplicate and delay rates.
    fn network(&mut self, cluster: &mut SimCluster, kind: u64) {
        let size = cluster.size() as u64;
        match kind {
            0..15 => {
                cluster.heal();
                let count = self.rng.between(1, (size - 1) / 2);
                let first = self.rng.below(size);
                let side: Vec<usize> = (0..count).map(|i| ((first + i) % size) as usize).collect();
                cluster.partition(&side);
                self.log.partitions += 1;
            }
            15..25 => cluster.heal(),
            _ => {
                let delay_max = self.rng.between(1, 30);
                cluster.set_net_faults(NetFaults {
                    drop_per_million: self.rng.below(200_000) as u32,
                    duplicate_per_million: self.rng.below(50_000) as u32,
                    delay_min: Duration::from_micros(100),
                    delay_max: Duration::from_millis(delay_max),
                });
                self.log.net_changes += 1;
            }
        }
    }

    /// Crashes a member in the middle of a WAL sync: what the sync covers
    /// is then not durable, whatever the member already said or did.
    async fn crash_in_sync(&mut self, cluster: &mut SimCluster) -> Result<(), Failure> {
        for _ in 0..SYNC_WAIT_STEPS_MAX {
            let syncing = cluster.syncing();
            if let Some(&member) = syncing.get(self.rng.below(syncing.len().max(1) as u64) as usize) {
                cluster.crash(member).await?;
                self.down_until_later(cluster, member);
                self.log.crashes += 1;
                return Ok(());
            }
            cluster.run_for(SYNC_WAIT_STEP).await?;
        }
        Ok(())
    }

    fn down_until_later(&mut self, cluster: &SimCluster, member: usize) {
        let back = cluster.elapsed() + Duration::from_millis(self.rng.between(10, DOWN_MAX_MS));
        self.down.retain(|d| d.member != member);
        self.down.push(Down {
            member,
            back_at: Some(back),
        });
    }

    /// Crashes a member, flips a bit of its synced log, and restarts it:
    /// the restart must refuse. One member per run at most is lost so, and
    /// none while a replacement leaves the quorum a member short.
    async fn flip(&mut self, cluster: &mut SimCluster) -> Result<(), Failure> {
        // One flip per run: a member lost for good is replaced at most
        // once. A member under replacement is out of the quorum, and a
        // learner never promoted was never in it. And a configuration
        // takes effect where it is applied, in raft as in etcd: a member
        // lost before every member has applied the last change can leave
        // voters that make a quorum of the new configuration while each
        // still counts by the old one (seed 313449: the leader applied a
        // promotion, acknowledged it and was lost; the other voter had the
        // entry but not its commit, and the promoted member still took
        // itself for a learner, so neither could be elected). An operator
        // loses a member to a failed disk at any time; the simulator
        // loses one for good only when the membership is settled, since
        // no raft can recover from the other case without
        // `--force-new-cluster`.
        if self.log.flips > 0
            || !self.lost_members().is_empty()
            || self.replacing.is_some()
            || !cluster.membership_settled()
        {
            return Ok(());
        }
        let Some(member) = self.running(cluster) else {
            return Ok(());
        };
        cluster.crash(member).await?;
        self.log.crashes += 1;
        let Some((file, offset)) = cluster.flip_bit(member) else {
            self.down_until_later(cluster, member);
            return Ok(());
        };
        self.log.flips += 1;
        match cluster.restart(member) {
            // The flip is never read: the member stays down for good.
            Err(StartError::NotJoinedYet(_)) => {
                self.down.retain(|d| d.member != member);
                self.down.push(Down { member, back_at: None });
            }
            Err(StartError::Refused(_)) => {
                self.log.flips_detected += 1;
                self.down.retain(|d| d.member != member);
                self.down.push(Down { member, back_at: None });
            }
            Ok(()) => self.log.flips_undetected.push(format!(
                "member {member} started with a bit flipped at byte {offset} of file {file}"
            )),
        }
        Ok(())
    }
}
