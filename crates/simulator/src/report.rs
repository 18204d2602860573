//! Many seeds' reports, summed up: the line `scripts/simulate.sh` ends
//! with, and what it prints for each failed seed (the command that
//! replays it and the shrunk history).

use std::fmt::Write as _;
use std::time::Duration;

use crate::seed::SeedReport;

/// Counts over a run of seeds.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub seeds: u64,
    /// Seeds whose history had a key with no valid order, or whose
    /// watchers saw a watch guarantee broken.
    pub violations: u64,
    /// Of those, seeds with a watch guarantee broken.
    pub watch_violations: u64,
    /// Events the watch checks compared against, over every seed.
    pub watch_events: u64,
    /// Events the watchers received, over every seed.
    pub watch_delivered: u64,
    /// Seeds whose members did not converge.
    pub diverged: u64,
    /// Seeds that lost an acknowledged write.
    pub lost_writes: u64,
    /// Seeds with a key the checker could not decide.
    pub undecided: u64,
    /// Seeds that failed otherwise: an unexpected fault or panic, a bit
    /// flip not detected, a restart refused.
    pub other_failures: u64,
    pub simulated: Duration,
    pub wall: Duration,
    pub operations: u64,
    pub crashes: u64,
    pub partitions: u64,
    pub fsync_failures: u64,
    pub flips_detected: u64,
    pub lost_unsynced: u64,
    pub torn_writes: u64,
    pub syncs_cut_short: u64,
    /// Applied entries crashes took from the stores, replayed from WALs.
    pub entries_replayed: u64,
    pub snapshots: u64,
    pub pauses: u64,
    /// Members replaced: begun, successor running, promoted, given up.
    pub replacements: u64,
    pub replacements_started: u64,
    pub replacements_promoted: u64,
    pub replacements_abandoned: u64,
}

impl Summary {
    pub fn add(&mut self, report: &SeedReport) {
        self.seeds += 1;
        let findings = &report.findings;
        self.violations += u64::from(!findings.violations.is_empty() || !findings.watch_violations.is_empty());
        self.watch_violations += u64::from(!findings.watch_violations.is_empty());
        self.watch_events += findings.watch_events as u64;
        self.watch_delivered += findings.watch_delivered as u64;
        self.diverged += u64::from(findings.diverged.is_some());
        self.lost_writes += u64::from(!findings.lost_writes.is_empty());
        self.undecided += u64::from(!findings.undecided.is_empty());
        self.other_failures += u64::from(report.failure.is_some() || report.faults.problems().next().is_some());
        self.simulated += report.simulated;
        self.wall += report.wall;
        self.operations += report.history.operations.len() as u64;
        self.crashes += report.faults.crashes;
        self.partitions += report.faults.partitions;
        self.fsync_failures += report.faults.fsync_failures;
        self.flips_detected += report.faults.flips_detected;
        self.lost_unsynced += report.loss.lost as u64;
        self.torn_writes += report.loss.torn as u64;
        self.syncs_cut_short += report.loss.cut_short as u64;
        self.entries_replayed += report.entries_replayed;
        self.snapshots += report.net.snapshots;
        self.pauses += report.faults.pauses;
        self.replacements += report.faults.replacements;
        self.replacements_started += report.faults.replacements_started;
        self.replacements_promoted += report.faults.replacements_promoted;
        self.replacements_abandoned += report.faults.replacements_abandoned.len() as u64;
    }

    /// Whether the run fails: any failed seed, or more undecided
    /// histories than the checker's named share allows.
    pub fn failed(&self) -> bool {
        self.violations + self.diverged + self.lost_writes + self.other_failures > 0
            || robustness::linearize::too_many_undecided(self.undecided, self.seeds)
    }

    /// The closing line. `wall_s` is the run's wall time; the seeds' own
    /// wall times summed are in [`Summary::detail`].
    pub fn line(&self, wall: Duration) -> String {
        format!(
            "seeds={} violations={} diverged={} lost_writes={} undecided={} simulated_s={:.1} wall_s={:.1}",
            self.seeds,
            self.violations,
            self.diverged,
            self.lost_writes,
            self.undecided,
            self.simulated.as_secs_f64(),
            wall.as_secs_f64()
        )
    }

    /// What the faults did, and seeds per second of one core's time.
    pub fn detail(&self) -> String {
        let per_core = self.seeds as f64 / self.wall.as_secs_f64().max(1e-9);
        format!(
            "operations={} watch_events={} watch_delivered={} watch_violations={} crashes={} pauses={} partitions={} snapshots={} fsync_failures={} writes_lost={} writes_torn={} syncs_cut_short={} entries_replayed={} flips_detected={} replaced={}/{}/{}/{} other_failures={} seeds_per_core_s={per_core:.2}",
            self.operations,
            self.watch_events,
            self.watch_delivered,
            self.watch_violations,
            self.crashes,
            self.pauses,
            self.partitions,
            self.snapshots,
            self.fsync_failures,
            self.lost_unsynced,
            self.torn_writes,
            self.syncs_cut_short,
            self.entries_replayed,
            self.flips_detected,
            self.replacements,
            self.replacements_started,
            self.replacements_promoted,
            self.replacements_abandoned,
            self.other_failures
        )
    }
}

/// What a failed seed prints: what failed, the command that replays it,
/// and the shrunk histories of the keys that broke.
pub fn failure(report: &SeedReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "seed {} ({} members) failed:", report.seed, report.members);
    if let Some(failure) = &report.failure {
        let _ = writeln!(out, "  {failure}");
    }
    for problem in report.faults.problems() {
        let _ = writeln!(out, "  {problem}");
    }
    if let Some(diverged) = &report.findings.diverged {
        let _ = writeln!(out, "  diverged: {diverged}");
    }
    for lost in report.findings.lost_writes.iter().take(5) {
        let _ = writeln!(out, "  lost: {lost}");
    }
    for violation in report.findings.watch_violations.iter().take(10) {
        let _ = writeln!(out, "  watch: {violation}");
    }
    if report.failed() {
        for member in &report.findings.members {
            let _ = writeln!(out, "  {member}");
        }
    }
    for (key, operations) in &report.findings.violations {
        let _ = writeln!(
            out,
            "  not linearizable: key {key}, shrunk to {} operations:",
            operations.len()
        );
        for operation in operations {
            let _ = writeln!(out, "    {}", serde_json::to_string(operation).unwrap_or_default());
        }
    }
    let _ = writeln!(
        out,
        "  replay: scripts/simulate.sh 1 --seed {} --members {} --history seed-{}.json",
        report.seed, report.members, report.seed
    );
    out
}
