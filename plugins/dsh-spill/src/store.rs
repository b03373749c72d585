//! The local spill store ([`LocalSpillStore`], `ctx.spillStore`): persists a tool's full text
//! under `<root>/session-<sha256(session id), 12 hex>/<12 random hex>-<safe name>` with a 0700
//! directory and an exclusively created 0600 file (behaviour notes: `docs/tools.md`, "Spill").

use std::collections::HashMap;
use std::fs::{self, DirBuilder, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use dsh_fs::FsService;
use dsh_kernel::{Context, Registration};
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

/// One save request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaveTextSpill {
    /// The owning session id (storage namespace).
    pub session_id: String,
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

/// The local spill store. The root is the configured one, else a private `dsh-spill-<uuid>`
/// directory (0700) under the OS temp dir, created at the first save. After creating a session
/// directory it grants the filesystem service read access to it
/// ([`FsService::grant_read_root`]) so the `read` tool can open the locator; the grant lives
/// as long as the plugin scope.
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

    /// Persists `req.content` verbatim and returns its locator.
    ///
    /// # Errors
    /// [`SpillError::UnsafePath`] when the session directory is a symlink or not a directory;
    /// [`SpillError::Io`] for any creation or write failure (the caller keeps the original).
    pub fn save_text(&self, req: &SaveTextSpill) -> Result<SpillRef, SpillError> {
        let dir = self.session_dir(&req.session_id)?;
        dir_builder()
            .recursive(true)
            .create(&dir)
            .map_err(|e| SpillError::Io(format!("{}: {e}", dir.display())))?;
        let meta = fs::symlink_metadata(&dir)
            .map_err(|e| SpillError::Io(format!("{}: {e}", dir.display())))?;
        if !meta.file_type().is_dir() {
            return Err(SpillError::UnsafePath(dir.display().to_string()));
        }
        self.ensure_grant(&dir);
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
