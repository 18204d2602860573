//! Builds broken on purpose: each is a failpoint of the member (compiled
//! in with the `failpoints` feature) that breaks one guarantee, armed for
//! the whole process. The simulator must catch each within a stated
//! number of seeds (`docs/robustness.md`); the test command checks the
//! first two.

/// A broken build: its name on the command line, the failpoint it arms,
/// and what it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Broken {
    pub name: &'static str,
    pub failpoint: &'static str,
    pub breaks: &'static str,
}

pub const BROKEN: [Broken; 5] = [
    Broken {
        name: "stale-read",
        failpoint: "kv::stale_read",
        breaks: "linearizable reads are served from the member's state without a ReadIndex",
    },
    Broken {
        name: "ack-before-fsync",
        failpoint: "kv::ack_before_fsync",
        breaks: "a member sends the messages that must follow its fsync (its votes and append acknowledgements) before the WAL is synced",
    },
    Broken {
        name: "double-apply",
        failpoint: "kv::double_apply",
        breaks: "after a restart the apply stage applies the last applied entry again",
    },
    Broken {
        name: "skip-term-check",
        failpoint: "kv::skip_read_term_check",
        breaks: "a leader answers ReadIndex before it has committed an entry of its term",
    },
    Broken {
        name: "watch-resume-skips",
        failpoint: "kv::watch_resume_skips",
        breaks: "a watch resumed from a past revision starts one revision later",
    },
];

/// The broken build named `name`.
pub fn named(name: &str) -> Option<Broken> {
    BROKEN.iter().copied().find(|b| b.name == name)
}

/// Arms `broken` for this process (and only it: arming one disarms the
/// others); why it cannot.
pub fn arm(broken: Broken) -> Result<(), String> {
    // The member's failpoints are compiled in when the `fail` crate has
    // them, whichever package's feature asked for it.
    if !fail::has_failpoints() {
        return Err("this simulator was built without failpoints (`--features failpoints`)".into());
    }
    for other in BROKEN {
        fail::remove(other.failpoint);
    }
    fail::cfg(broken.failpoint, "return").map_err(|e| format!("arming {}: {e}", broken.failpoint))
}

/// Disarms every broken build.
pub fn disarm() {
    for broken in BROKEN {
        fail::remove(broken.failpoint);
    }
}
