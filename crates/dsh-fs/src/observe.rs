//! Per-session read-before-write state: which version of which file each session (owner)
//! last saw, and the write/edit guards derived from it (see `docs/upstream/fs.md`, "Read before
//! write": observations `present{version}|absent` per (session, target)).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use crate::error::{FsError, Result};
use crate::service::{FsTarget, Observed, WriteIntent};

/// One observation of a target by a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    /// The session saw this version.
    Present(Observed),
    /// The session saw that the file did not exist (authorises only a guarded create).
    Absent,
}

/// The observation store. Keys are `(owner, target key)`; `owner` is the session id (any
/// stable string). Memory: one entry per file a session touched, each with a snapshot of at
/// most [`crate::SNAPSHOT_MAX_BYTES`].
#[derive(Debug, Default)]
pub struct Observations {
    map: Mutex<HashMap<(String, PathBuf), Observation>>,
}

impl Observations {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `obs` of `target` by `owner` (replacing the previous one).
    pub fn record(&self, owner: &str, target: &FsTarget, obs: Observation) {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((owner.to_owned(), target.key.clone()), obs);
    }

    /// The last observation of `target` by `owner`.
    pub fn get(&self, owner: &str, target: &FsTarget) -> Option<Observation> {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(owner.to_owned(), target.key.clone()))
            .cloned()
    }

    /// Forgets everything `owner` observed (e.g. when its session ends).
    pub fn forget_owner(&self, owner: &str) {
        self.map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(o, _), _| o != owner);
    }

    /// The guard of a `write` by `owner`: replace-if-version after a present observation,
    /// otherwise create-if-absent (so a new file needs no read, an existing unread one fails
    /// with `FS_NOT_OBSERVED`).
    pub fn write_intent(&self, owner: &str, target: &FsTarget) -> WriteIntent {
        match self.get(owner, target) {
            Some(Observation::Present(o)) => WriteIntent::ReplaceIfVersion(o),
            _ => WriteIntent::CreateIfAbsent,
        }
    }

    /// The guard of an `edit` by `owner`.
    ///
    /// # Errors
    /// [`FsError::NotObserved`] when `owner` has no present observation of `target`.
    pub fn edit_guard(&self, owner: &str, target: &FsTarget) -> Result<Observed> {
        match self.get(owner, target) {
            Some(Observation::Present(o)) => Ok(o),
            _ => Err(FsError::NotObserved(format!(
                "cannot edit \"{}\": the file has not been read in this session; read the file, then retry",
                target.display_path
            ))),
        }
    }
}
