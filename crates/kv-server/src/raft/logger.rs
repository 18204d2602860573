//! raft-rs logs through slog; this drain forwards its records to tracing,
//! so the member has one log. Its lines carry raft's logger name (the JSON
//! lines' `"logger":"raft"`) and begin with the member's id in hex, as
//! etcd's raft lines do (`8e9e05c52164694d became leader at term 2`).

pub struct TracingDrain;

/// Picks the `raft_id` raft-rs puts in its logger's values.
#[derive(Default)]
struct RaftId(Option<u64>);

impl slog::Serializer for RaftId {
    fn emit_arguments(&mut self, key: slog::Key, value: &std::fmt::Arguments<'_>) -> slog::Result {
        if key == "raft_id" {
            self.0 = value.to_string().parse().ok();
        }
        Ok(())
    }

    fn emit_u64(&mut self, key: slog::Key, value: u64) -> slog::Result {
        if key == "raft_id" {
            self.0 = Some(value);
        }
        Ok(())
    }
}

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record<'_>, values: &slog::OwnedKVList) -> Result<(), slog::Never> {
        use slog::KV;
        let mut id = RaftId::default();
        let _ = values.serialize(record, &mut id);
        let _ = record.kv().serialize(record, &mut id);
        let message = match id.0 {
            Some(id) => format!("{id:x} {}", record.msg()),
            None => record.msg().to_string(),
        };
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{message}")
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{message}"),
            slog::Level::Info => tracing::info!(target: "raft", "{message}"),
            slog::Level::Debug | slog::Level::Trace => tracing::debug!(target: "raft", "{message}"),
        }
        Ok(())
    }
}

pub fn logger() -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!())
}
