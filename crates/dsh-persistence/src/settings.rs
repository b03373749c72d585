//! [`PersistenceSettings`]: the settings section `dsh-persistence` (the user's `[persistence]`
//! table), typed, with snake_case keys and unknown keys refused. Backend-specific options live in
//! the backend plugin's own section (keyed by its plugin id).
//!
//! Behaviour: `docs/persistence.md` ("Settings").

use std::path::PathBuf;
use std::time::Duration;

use crate::coordinator::DEFAULT_WRITE_BATCH_MAX_DELAY_MS;

/// The default backend name.
pub const DEFAULT_BACKEND: &str = "jsonl";
/// The backend name that turns persistence off.
pub const NO_BACKEND: &str = "none";

/// Settings section `dsh-persistence`, e.g.
/// `{"backend": "jsonl", "dir": "/home/u/.dsh/sessions", "write_batch_ms": 200}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PersistenceSettings {
    /// Name of the registered backend to store sessions with (default `"jsonl"`); `"none"` turns
    /// persistence off.
    pub backend: Option<String>,
    /// The sessions directory. Absent ⇒ persistence is off (nothing is stored).
    pub dir: Option<PathBuf>,
    /// Batching window of the write path, in milliseconds (default 200).
    pub write_batch_ms: Option<u64>,
}

impl PersistenceSettings {
    /// The backend to open: `None` when persistence is off (`backend = "none"` or no `dir`).
    pub fn backend_name(&self) -> Option<&str> {
        let name = self.backend.as_deref().unwrap_or(DEFAULT_BACKEND);
        (name != NO_BACKEND && self.dir.is_some()).then_some(name)
    }

    /// The batching window (default [`DEFAULT_WRITE_BATCH_MAX_DELAY_MS`]).
    pub fn write_batch_delay(&self) -> Duration {
        Duration::from_millis(
            self.write_batch_ms
                .unwrap_or(DEFAULT_WRITE_BATCH_MAX_DELAY_MS),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_snake_case_and_unknown_keys_are_refused() {
        let s: PersistenceSettings = serde_json::from_value(
            serde_json::json!({"backend": "sqlite", "dir": "/d", "write_batch_ms": 7}),
        )
        .unwrap();
        assert_eq!(s.backend_name(), Some("sqlite"));
        assert_eq!(s.write_batch_delay(), Duration::from_millis(7));
        let e = serde_json::from_value::<PersistenceSettings>(
            serde_json::json!({"writeBatchMaxDelayMs": 7}),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("unknown field `writeBatchMaxDelayMs`"),
            "{e}"
        );
    }

    #[test]
    fn persistence_is_off_without_a_dir_or_with_backend_none() {
        let mut s = PersistenceSettings::default();
        assert_eq!(s.backend_name(), None);
        s.dir = Some("/d".into());
        assert_eq!(s.backend_name(), Some("jsonl"));
        s.backend = Some("none".into());
        assert_eq!(s.backend_name(), None);
        assert_eq!(s.write_batch_delay(), Duration::from_millis(200));
    }
}
