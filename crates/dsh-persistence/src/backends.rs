//! The backend registry: [`PersistenceBackends`] (a kernel service provided by this crate's
//! plugin) maps a backend name to its [`BackendFactory`]. Backend plugins register their factory
//! when they are applied; the seam opens the backend named by its `backend` setting once every
//! plugin is applied ([`crate::PersistenceService::resolve`]). Standalone session files
//! (`dsh sessions verify PATH`, `import PATH`) are read by whichever registered backend
//! recognizes them.
//!
//! Behaviour: `docs/persistence.md` ("Backends are plugins").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use dsh_session::EventTypeRegistry;

use crate::error::{PersistenceError, Result};
use crate::seam::SharedPersistence;
use crate::verify::RawLog;

/// What every backend is opened with (the backend-independent part of the configuration; a
/// backend reads its own options from its own settings section).
#[derive(Debug, Clone)]
pub struct BackendConfig {
    /// The sessions directory (absolute in the binary): where a backend keeps its files.
    pub dir: PathBuf,
    /// The event types loads accept (the kernel's registry, with plugin declarations).
    pub registry: Arc<EventTypeRegistry>,
}

/// One storage backend as the registry sees it.
pub trait BackendFactory: Send + Sync + 'static {
    /// Opens the backend's seam over `config` (may create `config.dir` lazily or now).
    ///
    /// # Errors
    /// The backend's open failure (e.g. a database of another schema).
    fn open(&self, config: &BackendConfig) -> Result<SharedPersistence>;

    /// Reads a standalone session artifact for verification: `None` when `path` is not an
    /// artifact of this backend (decided cheaply, by name or magic bytes); else one [`RawLog`]
    /// per session the artifact holds (read failures are items of the logs, not an `Err`).
    fn read_file(&self, path: &Path) -> Option<Vec<RawLog>> {
        let _ = path;
        None
    }
}

/// The registry of backend factories, by name (service `Arc<PersistenceBackends>`).
#[derive(Default)]
pub struct PersistenceBackends {
    factories: RwLock<BTreeMap<String, Arc<dyn BackendFactory>>>,
}

impl std::fmt::Debug for PersistenceBackends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersistenceBackends")
            .field("names", &self.names())
            .finish()
    }
}

impl PersistenceBackends {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `factory` under `name` (the value of the `backend` setting that selects it).
    ///
    /// # Errors
    /// [`PersistenceError::InvalidArgument`] when `name` is empty, `"none"` (reserved: no
    /// persistence) or already registered.
    pub fn register(
        &self,
        name: impl Into<String>,
        factory: Arc<dyn BackendFactory>,
    ) -> Result<()> {
        let name = name.into();
        if name.is_empty() || name == crate::settings::NO_BACKEND {
            return Err(PersistenceError::InvalidArgument {
                detail: format!("`{name}` cannot name a persistence backend"),
            });
        }
        let mut map = self
            .factories
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.contains_key(&name) {
            return Err(PersistenceError::InvalidArgument {
                detail: format!("persistence backend `{name}` is registered twice"),
            });
        }
        map.insert(name, factory);
        Ok(())
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.factories
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    fn get(&self, name: &str) -> Option<Arc<dyn BackendFactory>> {
        self.factories
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Opens the backend registered as `name`.
    ///
    /// # Errors
    /// [`PersistenceError::UnknownBackend`] (listing the registered names) when none is;
    /// the factory's own open failure.
    pub fn open(&self, name: &str, config: &BackendConfig) -> Result<SharedPersistence> {
        let factory = self
            .get(name)
            .ok_or_else(|| PersistenceError::UnknownBackend {
                name: name.to_owned(),
                registered: self.names(),
            })?;
        factory.open(config)
    }

    /// Reads a standalone session artifact with the first registered backend (in name order)
    /// that recognizes it.
    ///
    /// # Errors
    /// [`PersistenceError::Io`] when `path` cannot be read at all;
    /// [`PersistenceError::UnrecognizedFile`] when no registered backend recognizes it.
    pub fn read_file(&self, path: &Path) -> Result<Vec<RawLog>> {
        if let Err(e) = std::fs::metadata(path) {
            return Err(PersistenceError::io("open", path, e));
        }
        let factories: Vec<Arc<dyn BackendFactory>> = self
            .factories
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        for f in factories {
            if let Some(logs) = f.read_file(path) {
                return Ok(logs);
            }
        }
        Err(PersistenceError::UnrecognizedFile {
            path: path.to_path_buf(),
            registered: self.names(),
        })
    }
}
