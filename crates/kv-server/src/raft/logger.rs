//! raft-rs logs through slog; this drain forwards its records to tracing,
//! so the member has one log.

pub struct TracingDrain;

impl slog::Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &slog::Record<'_>, _values: &slog::OwnedKVList) -> Result<(), slog::Never> {
        let message = record.msg().to_string();
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
