//! The writes of one commit to sled, kept as a list rather than built
//! straight into a `sled::Batch`, whose contents cannot be read back: a
//! defragmentation under way repeats into its fresh database the writes
//! to keys its copy has already passed (see defrag.rs).
//!
//! Later writes to the same key win, as in a `sled::Batch`.

use sled::IVec;

/// Inserts (`Some`) and removals (`None`) in the order they were made.
#[derive(Default)]
pub struct Writes {
    ops: Vec<(IVec, Option<IVec>)>,
}

impl Writes {
    pub fn insert(&mut self, key: impl Into<IVec>, value: impl Into<IVec>) {
        self.ops.push((key.into(), Some(value.into())));
    }

    pub fn remove(&mut self, key: impl Into<IVec>) {
        self.ops.push((key.into(), None));
    }

    /// A sled batch of the writes whose key `keep` accepts, in order.
    /// `IVec`s share their bytes, so this copies no value.
    pub fn batch_of(&self, keep: impl Fn(&[u8]) -> bool) -> sled::Batch {
        let mut batch = sled::Batch::default();
        for (key, value) in self.ops.iter().filter(|(key, _)| keep(key)) {
            match value {
                Some(value) => batch.insert(key.clone(), value.clone()),
                None => batch.remove(key.clone()),
            }
        }
        batch
    }

    /// Each key written, with its final value (`None`: removed).
    pub fn outcome(&self) -> std::collections::BTreeMap<&[u8], Option<&[u8]>> {
        self.ops
            .iter()
            .map(|(key, value)| (key.as_ref(), value.as_deref()))
            .collect()
    }

    /// All the writes, as one sled batch.
    pub fn into_batch(self) -> sled::Batch {
        let mut batch = sled::Batch::default();
        for (key, value) in self.ops {
            match value {
                Some(value) => batch.insert(key, value),
                None => batch.remove(key),
            }
        }
        batch
    }
}
