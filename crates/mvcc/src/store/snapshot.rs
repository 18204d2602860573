//! The snapshot wire format: a snapshot of the whole store streamed out,
//! and restored into a store (for a member catching up, or a new cluster
//! from a backup).

use super::*;

/// Bytes of keys and values per sled batch while restoring a snapshot:
/// large enough that a restore is a few hundred batches for a full 2 GiB
/// store, small enough to keep one batch's memory modest.
pub const RESTORE_BATCH_BYTES: usize = 64 << 20;

/// Largest key or stored value a snapshot may hold. Values are bounded by
/// the server's `--max-request-bytes` (1.5 MiB by default, and etcd's docs
/// advise at most 10 MiB); 256 MiB stops a corrupt length from asking for
/// gigabytes while leaving room for any sane setting.
pub const SNAPSHOT_PART_BYTES_MAX: usize = 256 << 20;

/// Writes one sled item in the snapshot layout: each of key and value as
/// a u32 BE length, then its bytes.
pub(crate) fn write_item(out: &mut impl std::io::Write, key: &[u8], value: &[u8]) -> std::io::Result<()> {
    for part in [key, value] {
        let length = u32::try_from(part.len())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "an item over 4 GiB"))?;
        out.write_all(&length.to_be_bytes())?;
        out.write_all(part)?;
    }
    Ok(())
}

/// Reads one length-prefixed part of a snapshot; `None` at a clean end.
pub(super) fn read_part(input: &mut impl std::io::Read) -> Result<Option<Vec<u8>>> {
    let mut length = [0u8; 4];
    let mut filled = 0;
    while filled < 4 {
        match input.read(&mut length[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => return Err(corrupt("snapshot cut short")),
            Ok(n) => filled += n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            Err(error) => return Err(Error::Storage(format!("reading a snapshot: {error}"))),
        }
    }
    let length = u32::from_be_bytes(length) as usize;
    if length > SNAPSHOT_PART_BYTES_MAX {
        return Err(corrupt("snapshot part over its bound"));
    }
    let mut part = vec![0u8; length];
    input.read_exact(&mut part).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => corrupt("snapshot cut short"),
        _ => Error::Storage(format!("reading a snapshot: {e}")),
    })?;
    Ok(Some(part))
}

impl Store {
    /// Everything the store holds, for a raft snapshot, and the raft index
    /// it reflects (the consistent index). See [`Store::snapshot_to`].
    pub fn snapshot(&self) -> Result<(u64, Vec<u8>)> {
        let mut data = Vec::new();
        let index = self.snapshot_to(&mut data)?;
        Ok((index, data))
    }

    /// Writes everything the store holds to `out`, metadata included, and
    /// returns the raft index it reflects (the consistent index). Layout: a
    /// sequence of `key length u32 BE, key, value length u32 BE, value`
    /// for every sled key, a block's value being the block itself, never
    /// a pointer into this member's value files, and the format declared
    /// the one of blocks in sled (`records::FORMAT_BLOCKS_IN_SLED`).
    /// Taken under the read lock, so it is one consistent point; applies wait meanwhile, so `out` should be local
    /// (a file), not a network peer. The open batch goes to sled first.
    pub fn snapshot_to(&self, out: &mut impl std::io::Write) -> Result<u64> {
        self.check_usable()?;
        let mut state = self.state.write();
        commit(&self.db.read(), &self.poisoned, &mut state, self.observer.get())?;
        let state = RwLockWriteGuard::downgrade(state);
        let io = |e: std::io::Error| Error::Storage(format!("writing a snapshot: {e}"));
        for item in self.db.read().iter() {
            let (key, value) = item?;
            let value = match pointer_of(&key, &value) {
                Some(pointer) => state.values.read(&pointer)?.into(),
                None if key == records::META_FORMAT => records::FORMAT_BLOCKS_IN_SLED.to_be_bytes()[..].into(),
                None => value,
            };
            write_item(out, &key, &value).map_err(io)?;
        }
        Ok(state.consistent_index)
    }

    /// Replaces everything with a snapshot taken by [`Store::snapshot`] on
    /// another member. See [`Store::restore_from`].
    pub fn restore(&self, raft_index: u64, data: &[u8]) -> Result<()> {
        self.restore_from(raft_index, data)
    }

    /// Replaces everything with a snapshot read from `input` (written by
    /// [`Store::snapshot_to`] on another member) for raft index
    /// `raft_index`, then rebuilds the index. The consistent index becomes
    /// the snapshot's own when that is higher: the leader may have applied
    /// more by the time it wrote the snapshot, and those entries must then
    /// be skipped here.
    ///
    /// A snapshot can be larger than memory, so it goes in in batches of
    /// [`RESTORE_BATCH_BYTES`]. The first batch clears the store and sets
    /// the `restoring` mark; the last sets the consistent index and clears
    /// the mark, then everything is flushed. A store opened with the mark
    /// set ([`Store::is_restoring`]) holds part of a snapshot, and must be
    /// restored again before use.
    pub fn restore_from(&self, raft_index: u64, input: impl std::io::Read) -> Result<()> {
        self.restore_items(RestoreFor::Member(raft_index), input)
    }

    /// Replaces everything with a snapshot read from `input`, for a new
    /// cluster (a backup restored into new members): the data and its
    /// revisions are the snapshot's, but the consistent index is
    /// `raft_index`, where the new cluster's raft log starts, the
    /// membership is the new cluster's, and no alarm is kept (alarms name
    /// the old cluster's members).
    pub fn restore_for_new_cluster(
        &self,
        input: impl std::io::Read,
        raft_index: u64,
        membership: Vec<u8>,
    ) -> Result<()> {
        self.restore_items(RestoreFor::NewCluster { raft_index, membership }, input)
    }

    /// Restores for [`Store::restore_from`] or
    /// [`Store::restore_for_new_cluster`].
    pub(super) fn restore_items(&self, target: RestoreFor, mut input: impl std::io::Read) -> Result<()> {
        self.check_usable()?;
        let mut state = self.state.write();
        state.position("restore");
        // What the open batch holds is replaced with the rest, and a
        // defragmentation under way is abandoned.
        state.batch = Batch::default();
        state.copying = None;
        let mut batch = sled::Batch::default();
        for item in self.db.read().iter() {
            batch.remove(item?.0);
        }
        batch.insert(META_RESTORING, &[1u8][..]);
        self.apply_restore_batch(&mut state.values, batch)?;
        // Crash tests stop the process here, the store marked.
        fail::fail_point!("mvcc::restore_started", |_| std::process::abort());
        let (mut batch, snapshot_index) = self.restore_load(&mut state.values, &mut input)?;
        let consistent_index = match target {
            RestoreFor::Member(index) => index.max(snapshot_index),
            RestoreFor::NewCluster { raft_index, membership } => {
                batch.remove(META_ALARMS);
                batch.insert(META_MEMBERSHIP, membership);
                raft_index
            }
        };
        batch.insert(META_CONSISTENT_INDEX, &(consistent_index as i64).to_be_bytes());
        batch.remove(META_RESTORING);
        self.apply_restore_batch(&mut state.values, batch)?;
        // A snapshot from a member of an older format is upgraded here.
        records::upgrade(&self.db.read())?;
        // sled's flush, not `Store::flush`: this holds the state lock, and
        // there is no open batch to commit.
        self.db.read().flush()?;
        // Remembered compaction hashes describe the replaced history.
        let values = std::mem::replace(&mut state.values, ValueFiles::closed());
        *state = match load_state(&self.db.read(), values, consistent_index) {
            Ok(loaded) => loaded,
            Err(error) => {
                self.poisoned.store(true, Ordering::Release);
                return Err(error);
            }
        };
        let restored = state.position("restore");
        assert!(
            restored.consistent_index == consistent_index && state.batch.opened.is_none(),
            "a restore for index {consistent_index} left {restored:?}, batch open: {}",
            state.batch.opened.is_some()
        );
        self.compaction_queued
            .store(!state.compactions.is_empty(), Ordering::Release);
        self.alarm_kinds.store(kinds_of(&state.alarms), Ordering::Release);
        self.publish(&state, true);
        Ok(())
    }

    /// Loads a snapshot's items into the store, a batch at a time, and
    /// returns the last batch (still to apply) and the snapshot's
    /// consistent index.
    pub(super) fn restore_load(
        &self,
        values: &mut ValueFiles,
        input: &mut impl std::io::Read,
    ) -> Result<(sled::Batch, u64)> {
        let mut batch = sled::Batch::default();
        let mut batch_bytes = 0;
        let mut snapshot_index = 0;
        while let Some(key) = read_part(input)? {
            let value = read_part(input)?.ok_or_else(|| corrupt("snapshot cut short"))?;
            if key == META_STORED_BYTES {
                // The sender's count; this store counts its own once loaded.
                continue;
            }
            if key == META_CONSISTENT_INDEX {
                let bytes: [u8; 8] = value[..].try_into().map_err(|_| corrupt("metadata is not 8 bytes"))?;
                snapshot_index = i64::from_be_bytes(bytes) as u64;
                continue;
            }
            batch_bytes += key.len() + value.len();
            if crate::block::first_of(&key).is_some() {
                let pointer = values.append(&value)?;
                batch.insert(key, &pointer.encode()[..]);
            } else {
                batch.insert(key, value);
            }
            if batch_bytes >= RESTORE_BATCH_BYTES {
                self.apply_restore_batch(values, std::mem::take(&mut batch))?;
                batch_bytes = 0;
            }
        }
        Ok((batch, snapshot_index))
    }

    /// Hands sled one batch of a restore, once the blocks it points to
    /// are synced.
    pub(super) fn apply_restore_batch(&self, values: &mut ValueFiles, batch: sled::Batch) -> Result<()> {
        let applied = values.sync().and_then(|()| Ok(self.db.read().apply_batch(batch)?));
        if applied.is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
        applied
    }

    /// Whether the store holds part of a snapshot: a restore was under way
    /// when the process stopped. See [`Store::restore_from`].
    pub fn is_restoring(&self) -> Result<bool> {
        Ok(self.db.read().contains_key(META_RESTORING)?)
    }
}
