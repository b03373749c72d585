//! The local spill store ([`LocalSpillStore`], `ctx.spillStore`): persists a tool's full text
//! as `<12 random hex>-<safe name>` in the session's spill folder ([`LocalSpillStore::folder_for`]:
//! `<session folder>/spill/` beside the stored log, else a private temporary folder) with a 0700
//! directory and an exclusively created 0600 file (behaviour notes: `docs/tools.md`, "Spill").

use std::collections::HashMap;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use dsh_fs::FsService;
use dsh_kernel::{Context, Disposer, Registration};
use dsh_session::SessionHeader;
use sha2::{Digest, Sha256};

/// Errors of the spill store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum SpillError {
    /// `SPILL_IO_ERROR`: creating the directory or writing the file failed (permissions,
    /// ENOSPC, an existing path at the random name).
    #[error("spill save failed: {0}")]
    #[code("SPILL_IO_ERROR")]
    Io(String),
    /// `SPILL_UNSAFE_PATH`: the session directory exists but is not a real directory (e.g. a
    /// planted symlink).
    #[error("spill directory is unsafe: {0}")]
    #[code("SPILL_UNSAFE_PATH")]
    UnsafePath(String),
}

/// Who produced a spilled artifact (naming and inspection only, not access control).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillSource {
    /// The tool whose result was spilled.
    pub tool_name: String,
    /// The model-issued call id.
    pub call_id: String,
    /// A short label (`result`).
    pub label: String,
}

/// Name of the spill folder inside a session's own folder (`<session folder>/spill/`).
pub const SPILL_DIR_NAME: &str = "spill";

/// One save request.
#[derive(Debug, Clone, PartialEq)]
pub struct SaveTextSpill {
    /// The owning session id (storage namespace).
    pub session_id: String,
    /// The owning session's header, when known: with it the file goes to the session's own
    /// folder ([`LocalSpillStore::folder_for`]); without it, to `<root>/session-<hash>/`.
    pub header: Option<SessionHeader>,
    /// The producing tool call.
    pub source: SpillSource,
    /// A name hint (e.g. `bash.txt`); encoded to one safe path segment, never used as a path.
    pub suggested_name: String,
    /// The full text, saved verbatim.
    pub content: String,
}

/// A saved artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillRef {
    /// Model-facing handle: the absolute path of the file.
    pub locator: String,
    /// Exact UTF-8 byte length saved.
    pub bytes: u64,
    /// Model-facing retrieval guidance.
    pub retrieval_hint: String,
}

/// The retrieval hint of local spill files (upstream text).
pub const RETRIEVAL_HINT: &str =
    "Use read with offset/limit, or grep this path to search within it.";

/// Encodes an arbitrary string as one safe path segment, injectively: `[A-Za-z0-9._-]` kept,
/// every other UTF-16 code unit (and `~`) escaped as `~XXXX` (upper hex); `.`/`..` escaped; the
/// empty string is `~` (upstream `encodeSegment`).
pub fn encode_segment(raw: &str) -> String {
    if raw.is_empty() {
        return "~".to_owned();
    }
    if raw == "." {
        return "~002E".to_owned();
    }
    if raw == ".." {
        return "~002E~002E".to_owned();
    }
    let mut out = String::with_capacity(raw.len());
    for unit in raw.encode_utf16() {
        let keep = unit < 0x80 && {
            let c = unit as u8 as char;
            c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-'
        };
        if keep {
            out.push(unit as u8 as char);
        } else {
            out.push_str(&format!("~{unit:04X}"));
        }
    }
    out
}

/// The session directory `<root>/session-<first 12 hex of sha256(session id)>` (upstream).
pub fn session_dir(root: &Path, session_id: &str) -> PathBuf {
    let digest = Sha256::digest(session_id.as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    root.join(format!("session-{hex}"))
}

/// The local spill store. Where a session's files go ([`LocalSpillStore::folder_for`]): with a
/// configured `root`, `<root>/session-<hash>/`; else, for a stored session, `spill/` in the
/// session's own folder beside its log (the persistence seam's `session_dir`: the files survive
/// a resume and are removed with the session by `dsh sessions delete`); else (ephemeral runs) a
/// private `dsh-spill-<uuid>` directory (0700) under the OS temp dir, created at the first save,
/// whose session folders are removed when their session is disposed and which is itself
/// removed when the plugin scope is disposed. A session's folder is granted to the filesystem
/// service for reading ([`FsService::grant_read_root`]) when it is created and, for a resumed
/// session whose folder exists, when the session starts, so `read` (and `grep`) can open a
/// locator; the grant is dropped with the session.
pub struct LocalSpillStore {
    ctx: Context,
    configured_root: Option<PathBuf>,
    root: Mutex<Option<PathBuf>>,
    grants: Mutex<HashMap<PathBuf, Registration>>,
}

impl std::fmt::Debug for LocalSpillStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSpillStore")
            .field("root", &self.configured_root)
            .finish()
    }
}

fn dir_builder() -> DirBuilder {
    let mut b = DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b
}

impl LocalSpillStore {
    /// A store owned by `ctx` (grants are registered through it); `root` = configured root.
    pub fn new(ctx: Context, root: Option<PathBuf>) -> Self {
        Self {
            ctx,
            configured_root: root,
            root: Mutex::new(None),
            grants: Mutex::new(HashMap::new()),
        }
    }

    fn root(&self) -> Result<PathBuf, SpillError> {
        let mut slot = self.root.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(r) = &*slot {
            return Ok(r.clone());
        }
        let r = match &self.configured_root {
            Some(r) => {
                dir_builder()
                    .recursive(true)
                    .create(r)
                    .map_err(|e| SpillError::Io(format!("{}: {e}", r.display())))?;
                r.clone()
            }
            None => {
                let r = std::env::temp_dir()
                    .join(format!("dsh-spill-{}", uuid::Uuid::new_v4().simple()));
                dir_builder()
                    .create(&r)
                    .map_err(|e| SpillError::Io(format!("{}: {e}", r.display())))?;
                // a temporary root dies with the plugin scope (no spill folders left in /tmp)
                let gone = r.clone();
                let cleanup = self.ctx.effect(
                    "spill/temp-root",
                    vec![Disposer::infallible(move || {
                        let _ = fs::remove_dir_all(&gone);
                    })],
                );
                match cleanup {
                    Ok(reg) => reg.detach(),
                    Err(e) => {
                        let _ = fs::remove_dir_all(&r);
                        return Err(SpillError::Io(format!("{}: {e}", r.display())));
                    }
                }
                r
            }
        };
        *slot = Some(r.clone());
        Ok(r)
    }

    /// The session directory of `session_id` under this store's root (created on demand by
    /// [`LocalSpillStore::save_text`]).
    ///
    /// # Errors
    /// [`SpillError::Io`] when the root cannot be created.
    pub fn session_dir(&self, session_id: &str) -> Result<PathBuf, SpillError> {
        Ok(session_dir(&self.root()?, session_id))
    }

    /// The spill folder of a session: `<root>/session-<hash>/` with a configured root; else
    /// `<session folder>/spill/` when the session is stored (the persistence seam names the
    /// session's folder); else `<temporary root>/session-<hash>/`. No I/O except creating the
    /// temporary root.
    ///
    /// # Errors
    /// [`SpillError::Io`] when the temporary root cannot be created.
    pub fn folder_for(&self, header: &SessionHeader) -> Result<PathBuf, SpillError> {
        if self.configured_root.is_none()
            && let Some(dir) = self.stored_folder(header)
        {
            return Ok(dir.join(SPILL_DIR_NAME));
        }
        self.session_dir(&header.id)
    }

    /// The session's own folder from the persistence seam, when sessions are stored.
    fn stored_folder(&self, header: &SessionHeader) -> Option<PathBuf> {
        let service = self.ctx.get::<dsh_persistence::PersistenceService>()?;
        service.backend().ok()?.session_dir(header)
    }

    /// A session started (or was resumed): grant its existing spill folder for reading, so the
    /// locators in its earlier tool results stay readable.
    pub(crate) fn session_started(&self, header: &SessionHeader) {
        if self.configured_root.is_none()
            && let Some(dir) = self.stored_folder(header)
        {
            let dir = dir.join(SPILL_DIR_NAME);
            if dir.is_dir() {
                self.ensure_grant(&dir);
            }
        }
    }

    /// A session was disposed: drop the read grant of its folder; a folder under the temporary
    /// root (an unstored session) is removed.
    pub(crate) fn session_ended(&self, header: &SessionHeader) {
        let stored = if self.configured_root.is_none() {
            self.stored_folder(header)
        } else {
            None
        };
        let (dir, remove) = match stored {
            Some(d) => (d.join(SPILL_DIR_NAME), false),
            None => {
                let root = match &self.configured_root {
                    Some(r) => r.clone(),
                    None => match &*self.root.lock().unwrap_or_else(PoisonError::into_inner) {
                        Some(r) => r.clone(),
                        None => return,
                    },
                };
                (
                    session_dir(&root, &header.id),
                    self.configured_root.is_none(),
                )
            }
        };
        self.grants
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&dir);
        if remove {
            let _ = fs::remove_dir_all(&dir);
        }
    }

    fn ensure_grant(&self, dir: &Path) {
        let mut grants = self.grants.lock().unwrap_or_else(PoisonError::into_inner);
        if grants.contains_key(dir) {
            return;
        }
        let Some(fs) = self.ctx.get::<FsService>() else {
            tracing::debug!(target: "dsh_spill", "no filesystem service: spill files are not readable by the read tool");
            return;
        };
        match fs.grant_read_root(&self.ctx, dir) {
            Ok(reg) => {
                grants.insert(dir.to_path_buf(), reg);
            }
            Err(e) => {
                tracing::warn!(target: "dsh_spill", "cannot grant read access to {}: {e}", dir.display());
            }
        }
    }

    /// The session's spill folder ([`LocalSpillStore::folder_for`]), created (0700) and granted
    /// to the filesystem service for reading, for a tool that writes its own files there (the
    /// bash tool's output files, through [`dsh_tools::OutputFolders`]).
    ///
    /// # Errors
    /// [`SpillError::UnsafePath`] when the folder is a symlink or not a directory;
    /// [`SpillError::Io`] when it cannot be created.
    pub fn prepare_folder(&self, header: &SessionHeader) -> Result<PathBuf, SpillError> {
        let dir = self.folder_for(header)?;
        self.ready(&dir)?;
        Ok(dir)
    }

    /// Creates `dir` (0700, with parents), checks it is a real directory, grants it for reading.
    fn ready(&self, dir: &Path) -> Result<(), SpillError> {
        dir_builder()
            .recursive(true)
            .create(dir)
            .map_err(|e| SpillError::Io(format!("{}: {e}", dir.display())))?;
        let meta = fs::symlink_metadata(dir)
            .map_err(|e| SpillError::Io(format!("{}: {e}", dir.display())))?;
        if !meta.file_type().is_dir() {
            return Err(SpillError::UnsafePath(dir.display().to_string()));
        }
        self.ensure_grant(dir);
        Ok(())
    }

    /// Persists `req.content` verbatim and returns its locator.
    ///
    /// # Errors
    /// [`SpillError::UnsafePath`] when the session directory is a symlink or not a directory;
    /// [`SpillError::Io`] for any creation or write failure (the caller keeps the original).
    pub fn save_text(&self, req: &SaveTextSpill) -> Result<SpillRef, SpillError> {
        let dir = match &req.header {
            Some(h) => self.folder_for(h)?,
            None => self.session_dir(&req.session_id)?,
        };
        self.ready(&dir)?;
        let random = uuid::Uuid::new_v4().simple().to_string();
        let name = format!("{}-{}", &random[..12], encode_segment(&req.suggested_name));
        let path = dir.join(name);
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        // create_new never follows or replaces an existing path (a planted symlink fails)
        let mut file = opts
            .open(&path)
            .map_err(|e| SpillError::Io(format!("{}: {e}", path.display())))?;
        let res = file
            .write_all(req.content.as_bytes())
            .and_then(|()| file.sync_all());
        drop(file);
        if let Err(e) = res {
            let _ = fs::remove_file(&path);
            return Err(SpillError::Io(format!("{}: {e}", path.display())));
        }
        Ok(SpillRef {
            locator: path.display().to_string(),
            bytes: req.content.len() as u64,
            retrieval_hint: RETRIEVAL_HINT.to_owned(),
        })
    }
}
