//! The store's power: whether its writes still reach the disk.
//!
//! A process has power until it dies, and a killed process writes
//! nothing more: sled keeps what it was handed, and the store's open
//! batch (not yet handed over) is lost, for the WAL to replay. A
//! simulator runs many members in one process, so a member it crashes
//! leaves its store object behind; cutting that store's power, a switch
//! the simulator holds below the store, makes the store behave as the
//! killed process's would: every call is refused and closing it writes
//! nothing. In production the power is never cut.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A switch shared by a store and whoever may cut its power.
#[derive(Debug, Clone, Default)]
pub struct Power {
    cut: Arc<AtomicBool>,
}

impl Power {
    /// Cuts the power, for good: the store writes nothing from now on.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
    }

    /// Whether the power was cut.
    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::Acquire)
    }
}
