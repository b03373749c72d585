//! The local filesystem service ([`FsService`], provided as `ctx.fs`): path resolution with
//! workspace containment and read grants, bounded streaming text reads, guarded atomic writes
//! and literal edits (see `docs/upstream/fs.md`).

use std::collections::hash_map::DefaultHasher;
use std::fs::{self, File, OpenOptions, Permissions};
use std::hash::{Hash, Hasher};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dsh_kernel::{CancellationToken, Context, Disposer, Registration};
use sha2::{Digest, Sha256};

use crate::Workspace;
use crate::error::{FsError, Result};
use crate::text::{
    self, BOM, ReadWindow, WindowBuilder, WindowCaps, apply_edit, decode, detect_binary,
    dominant_eol, normalize_eol, not_text_binary, not_text_utf8, unified_diff,
};

/// Files up to this many bytes keep an LF snapshot in their observation, so a later
/// `FS_STALE_VERSION` can show a diff of the external change (256 KiB).
pub const SNAPSHOT_MAX_BYTES: u64 = 256 * 1024;

/// Limits and policy of the service. Defaults: reads of files up to 256 MiB (streamed, bounded
/// memory), edits and overwrites of files up to 10 MiB, written content up to 10 MiB, nothing
/// outside the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsConfig {
    /// Largest file `read` accepts, in bytes (`FS_TOO_LARGE` above).
    pub max_read_file_bytes: u64,
    /// Largest existing file `edit`/`write` loads, and largest content `write` accepts, in bytes
    /// (`FS_TOO_LARGE` above).
    pub max_edit_file_bytes: u64,
    /// Policy: allow reads *and* writes anywhere (disables containment).
    pub allow_outside_workspace: bool,
    /// Policy: allow reads (only) anywhere.
    pub allow_read_outside_workspace: bool,
}

impl Default for FsConfig {
    fn default() -> Self {
        Self {
            max_read_file_bytes: 256 * 1024 * 1024,
            max_edit_file_bytes: 10 * 1024 * 1024,
            allow_outside_workspace: false,
            allow_read_outside_workspace: false,
        }
    }
}

/// What a resolved target will be used for; decides which roots contain it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reading: the workspace or any granted read root.
    Read,
    /// Writing or editing: the workspace only.
    Write,
}

/// A resolved path: a stable identity plus the path shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FsTarget {
    /// Opaque target key: the canonical real path (symlinks resolved; missing tail components
    /// appended). Aliases of one file share it.
    pub key: PathBuf,
    /// Model/UI-facing path: the absolute lexical path the caller named (`cwd` joined, `.` and
    /// `..` folded), not the symlink-resolved one.
    pub display_path: String,
}

/// Opaque file version: `sha256:<64 hex>` of the file's bytes. Content-based, so a touch that
/// changes only the mtime keeps the version (BC-15 case 3).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FsVersion(pub String);

impl FsVersion {
    /// The version of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(format!("sha256:{}", hex(&Sha256::digest(bytes))))
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A present observation: the version a session saw, and (for files up to
/// [`SNAPSHOT_MAX_BYTES`]) the LF text it saw, used to diff a later external change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The version seen.
    pub version: FsVersion,
    /// The BOM-less, LF-normalised text seen, when small enough to keep.
    pub snapshot: Option<Arc<str>>,
}

/// Guard of a full-file write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteIntent {
    /// Create or overwrite without any check.
    Unconditional,
    /// Only create: an existing file fails with `FS_NOT_OBSERVED`.
    CreateIfAbsent,
    /// Only replace the observed version: absence or another version fails with
    /// `FS_STALE_VERSION`.
    ReplaceIfVersion(Observed),
}

/// Whether a write created or replaced the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOperation {
    /// The file did not exist.
    Create,
    /// An existing file was replaced.
    Update,
}

impl WriteOperation {
    /// `"create"` or `"update"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Update => "update",
        }
    }
}

/// Outcome of [`FsService::write_text`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Create or update.
    pub operation: WriteOperation,
    /// Version after the write.
    pub version: FsVersion,
    /// BOM-less LF text before the write (`None` for a create).
    pub before: Option<String>,
    /// BOM-less LF text after the write.
    pub after: String,
    /// Unified diff `before → after` (empty for a create or an identical overwrite).
    pub diff: String,
}

/// A literal edit request (the `edit` tool's arguments after validation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditRequest {
    /// Literal non-empty text to replace (matched under the `text` module's normalisation rule).
    pub old_string: String,
    /// Replacement text; empty deletes the match.
    pub new_string: String,
    /// Replace every non-overlapping match instead of requiring exactly one.
    pub replace_all: bool,
}

/// Outcome of [`FsService::edit_text`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditOutcome {
    /// Version after the edit.
    pub version: FsVersion,
    /// BOM-less LF text before the edit.
    pub before: String,
    /// BOM-less LF text after the edit.
    pub after: String,
    /// Number of replaced spans.
    pub replacements: usize,
    /// Unified diff `before → after`.
    pub diff: String,
}

/// Outcome of [`FsService::read_text`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOutcome {
    /// The bounded line window.
    pub window: ReadWindow,
    /// The version of the whole file as read.
    pub observed: Observed,
}

/// Kind of a filesystem entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// Anything else (device, socket, FIFO).
    Other,
}

/// Metadata of an existing target (symlinks followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsInfo {
    /// The entry kind.
    pub kind: FsKind,
    /// Size in bytes.
    pub size: u64,
}

type GrantList = Arc<Mutex<Vec<(u64, PathBuf)>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The local filesystem service. Provide it as `Arc<FsService>` (`ctx.fs`); every other
/// plugin reaches it with `ctx.get::<FsService>()`.
///
/// Security model: every operation takes an [`FsTarget`] from [`FsService::resolve`], which
/// canonicalises the path (following symlinks like the OS would) and refuses, with
/// `FS_OUTSIDE_WORKSPACE`, a real path outside the session's workspace root — unless it is a
/// read inside a root granted by [`FsService::grant_read_root`] or the [`FsConfig`] policy
/// allows it. Writes never use grants. The check runs at resolve time; a symlink swapped in
/// between resolve and open is not defended against (no `openat2` without `unsafe`).
#[derive(Debug)]
pub struct FsService {
    config: FsConfig,
    grants: GrantList,
    next_grant: std::sync::atomic::AtomicU64,
    stripes: Vec<Mutex<()>>,
}

impl Default for FsService {
    fn default() -> Self {
        Self::new(FsConfig::default())
    }
}

impl FsService {
    /// A service with `config`.
    pub fn new(config: FsConfig) -> Self {
        Self {
            config,
            grants: Arc::default(),
            next_grant: std::sync::atomic::AtomicU64::new(1),
            stripes: (0..32).map(|_| Mutex::new(())).collect(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FsConfig {
        &self.config
    }

    /// Grants read access to `root` (and everything under it) until the returned registration
    /// is dropped or `ctx` is disposed. This is how other plugins (e.g. spill) make their files
    /// readable by the `read` tool.
    ///
    /// # Errors
    /// [`FsError::NotFound`]/[`FsError::Io`] when `root` cannot be canonicalised (it must
    /// exist); [`FsError::Io`] when `ctx` is inactive.
    pub fn grant_read_root(&self, ctx: &Context, root: &Path) -> Result<Registration> {
        let display = root.display().to_string();
        let canon = fs::canonicalize(root).map_err(|e| FsError::from_io("grant", &display, &e))?;
        let id = self
            .next_grant
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.grants).push((id, canon));
        let grants = self.grants.clone();
        ctx.effect(
            "fs/read-grant",
            vec![Disposer::infallible(move || {
                lock(&grants).retain(|(g, _)| *g != id);
            })],
        )
        .map_err(|e| {
            lock(&self.grants).retain(|(g, _)| *g != id);
            FsError::Io(format!("cannot grant read access to \"{display}\": {e}"))
        })
    }

    /// The currently granted read roots (canonical), in grant order.
    pub fn read_roots(&self) -> Vec<PathBuf> {
        lock(&self.grants).iter().map(|(_, p)| p.clone()).collect()
    }

    /// Resolves `path` for `access`: a relative path against `workspace`'s
    /// [`cwd`](crate::Workspace::cwd), fenced by its [`root`](crate::Workspace::root) (a bare
    /// `&Path` is both).
    ///
    /// # Errors
    /// [`FsError::InvalidArgs`] for an empty path; [`FsError::OutsideWorkspace`] when the real
    /// path (symlinks followed) is outside the workspace root and, for reads, every granted root —
    /// unless the [`FsConfig`] policy allows it; I/O errors from canonicalisation (e.g.
    /// [`FsError::NotFound`] when `workspace` does not exist, [`FsError::Io`] for a symlink
    /// loop).
    pub fn resolve(
        &self,
        path: &str,
        workspace: impl Into<Workspace>,
        access: Access,
    ) -> Result<FsTarget> {
        self.resolve_fenced(path, &workspace.into(), access, true)
    }

    /// Resolves `path` like [`FsService::resolve`] but without the workspace fence: for a call
    /// a person approved (an `allowed-once` answer for that very call), so the approval lets it
    /// run. Symlinks are still resolved, so the target is the real path.
    ///
    /// # Errors
    /// As [`FsService::resolve`], minus [`FsError::OutsideWorkspace`].
    pub fn resolve_approved(
        &self,
        path: &str,
        workspace: impl Into<Workspace>,
        access: Access,
    ) -> Result<FsTarget> {
        self.resolve_fenced(path, &workspace.into(), access, false)
    }

    fn resolve_fenced(
        &self,
        path: &str,
        workspace: &Workspace,
        access: Access,
        fenced: bool,
    ) -> Result<FsTarget> {
        if path.trim().is_empty() {
            return Err(FsError::InvalidArgs(
                "file_path must be a non-empty string".to_owned(),
            ));
        }
        let p = Path::new(path);
        let abs = if p.is_absolute() {
            p.to_path_buf()
        } else {
            workspace.cwd.join(p)
        };
        let display = lexical(&abs).display().to_string();
        let key = real_path(&abs, &display, 0)?;
        let ws_display = workspace.root.display().to_string();
        let root = fs::canonicalize(&workspace.root)
            .map_err(|e| FsError::from_io("resolve workspace", &ws_display, &e))?;
        let inside = !fenced
            || key.starts_with(&root)
            || self.config.allow_outside_workspace
            || (access == Access::Read
                && (self.config.allow_read_outside_workspace
                    || lock(&self.grants).iter().any(|(_, g)| key.starts_with(g))));
        if !inside {
            let via = if key != lexical(&abs) {
                format!(" (it resolves to \"{}\")", key.display())
            } else {
                String::new()
            };
            let what = match access {
                Access::Read => "read",
                Access::Write => "write",
            };
            return Err(FsError::OutsideWorkspace {
                message: format!(
                    "cannot {what} \"{display}\"{via}: the path is outside the workspace \"{}\" and is refused by the filesystem policy",
                    root.display()
                ),
                real_path: key,
            });
        }
        Ok(FsTarget {
            key,
            display_path: display,
        })
    }

    /// Metadata of `target`, `None` when it does not exist.
    ///
    /// # Errors
    /// OS errors other than not-found, mapped by [`FsError::from_io`].
    pub fn stat(&self, target: &FsTarget) -> Result<Option<FsInfo>> {
        match fs::metadata(&target.key) {
            Ok(m) => Ok(Some(FsInfo {
                kind: kind_of(&m),
                size: m.len(),
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(FsError::from_io("stat", &target.display_path, &e)),
        }
    }

    fn stripe(&self, target: &FsTarget) -> MutexGuard<'_, ()> {
        let mut h = DefaultHasher::new();
        target.key.hash(&mut h);
        let i = (h.finish() % self.stripes.len() as u64) as usize;
        lock(&self.stripes[i])
    }

    /// Reads a bounded line window of `target`, streaming the file in 64 KiB chunks (memory is
    /// bounded by the caps, not the file), and returns it with the whole file's version.
    ///
    /// # Errors
    /// [`FsError::NotFound`] (missing file, or `caps.offset` past the last line),
    /// [`FsError::NotRegularFile`], [`FsError::TooLarge`] (over `max_read_file_bytes`),
    /// [`FsError::NotText`] (NUL in the first 8 KiB, a known binary magic number, or invalid
    /// UTF-8 anywhere; the message names type and size only), [`FsError::InvalidArgs`]
    /// (`offset` or `limit` 0), other OS errors.
    pub fn read_text(&self, target: &FsTarget, caps: WindowCaps) -> Result<ReadOutcome> {
        self.read_text_with(target, caps, &CancellationToken::new())
    }

    /// [`FsService::read_text`] that stops with [`FsError::Aborted`] (`read aborted`) when
    /// `cancel` fires (checked before each 64 KiB chunk).
    ///
    /// # Errors
    /// As [`FsService::read_text`], plus [`FsError::Aborted`].
    pub fn read_text_with(
        &self,
        target: &FsTarget,
        caps: WindowCaps,
        cancel: &CancellationToken,
    ) -> Result<ReadOutcome> {
        let d = &target.display_path;
        if caps.offset == 0 || caps.limit == 0 {
            return Err(FsError::InvalidArgs(
                "offset and limit must be positive integers".to_owned(),
            ));
        }
        let (mut file, size) = open_regular(&target.key, "read", d)?;
        if size > self.config.max_read_file_bytes {
            return Err(FsError::TooLarge(format!(
                "cannot read \"{d}\": {size} bytes exceeds the {}-byte limit",
                self.config.max_read_file_bytes
            )));
        }
        let mut sample = Vec::with_capacity(text::BINARY_SAMPLE_BYTES);
        (&mut file)
            .take(text::BINARY_SAMPLE_BYTES as u64)
            .read_to_end(&mut sample)
            .map_err(|e| FsError::from_io("read", d, &e))?;
        if let Some(kind) = detect_binary(&sample) {
            return Err(not_text_binary("read", d, kind, size));
        }
        let mut hasher = Sha256::new();
        let keep_snapshot = size <= SNAPSHOT_MAX_BYTES;
        let mut raw_all: Vec<u8> = Vec::new();
        let mut builder = WindowBuilder::new(caps);
        let mut carry: Vec<u8> = Vec::new();
        let mut first = true;
        let mut total: u64 = 0;
        let mut chunk = sample;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            if cancel.is_cancelled() {
                return Err(FsError::Aborted("read aborted".to_owned()));
            }
            if chunk.is_empty() {
                let n = file
                    .read(&mut buf)
                    .map_err(|e| FsError::from_io("read", d, &e))?;
                if n == 0 {
                    break;
                }
                chunk = buf[..n].to_vec();
            }
            total += chunk.len() as u64;
            if total > self.config.max_read_file_bytes {
                return Err(FsError::TooLarge(format!(
                    "cannot read \"{d}\": content exceeds the {}-byte limit",
                    self.config.max_read_file_bytes
                )));
            }
            hasher.update(&chunk);
            if keep_snapshot {
                raw_all.extend_from_slice(&chunk);
            }
            carry.extend_from_slice(&chunk);
            chunk.clear();
            let mut start = 0;
            if first && carry.len() >= BOM.len() {
                if carry.starts_with(BOM) {
                    start = BOM.len();
                }
                first = false;
            } else if first && !BOM.starts_with(&carry) {
                first = false;
            }
            if first {
                continue;
            }
            match std::str::from_utf8(&carry[start..]) {
                Ok(s) => {
                    builder.push(s);
                    carry.clear();
                }
                Err(e) => {
                    if e.error_len().is_some() {
                        return Err(not_text_utf8("read", d, size));
                    }
                    let valid = start + e.valid_up_to();
                    let s = std::str::from_utf8(&carry[start..valid])
                        .map_err(|_| not_text_utf8("read", d, size))?;
                    builder.push(s);
                    carry.drain(..valid);
                }
            }
        }
        if !carry.is_empty() {
            // a file shorter than a BOM that is a BOM prefix, or a truncated UTF-8 sequence
            let start = if carry.starts_with(BOM) { BOM.len() } else { 0 };
            let s = std::str::from_utf8(&carry[start..])
                .map_err(|_| not_text_utf8("read", d, total))?;
            builder.push(s);
        }
        let window = builder.finish(d)?;
        let version = FsVersion(format!("sha256:{}", hex(&hasher.finalize())));
        let snapshot = if keep_snapshot && total <= SNAPSHOT_MAX_BYTES {
            decode(&raw_all, "read", d)
                .ok()
                .map(|t| Arc::<str>::from(normalize_eol(&t.text)))
        } else {
            None
        };
        Ok(ReadOutcome {
            window,
            observed: Observed { version, snapshot },
        })
    }

    /// Writes `content` to `target` atomically (temp file in the same directory, fsync,
    /// rename, directory fsync), creating missing parent directories. An existing file keeps
    /// its permission bits; a new file gets `0666 & !umask`. Owner and group become the writing
    /// process's, and a hard link elsewhere keeps the old content (the rename replaces the
    /// directory entry); a symlink named by the caller stays and its target is replaced.
    ///
    /// Line-ending rule for overwrites: when the existing file starts with a BOM and `content`
    /// does not, the BOM is kept; when the existing file is CRLF-dominant and `content` has no
    /// `\r` at all, its `\n`s are written as `\r\n`. New files are written verbatim.
    ///
    /// # Errors
    /// [`FsError::TooLarge`] (content or existing file over `max_edit_file_bytes`),
    /// [`FsError::NotObserved`] (`CreateIfAbsent` and the file exists),
    /// [`FsError::StaleVersion`] (`ReplaceIfVersion` and the file is gone or differs; message
    /// includes a diff of the change), [`FsError::NotText`] (existing file is binary),
    /// [`FsError::NotRegularFile`], OS errors.
    pub fn write_text(
        &self,
        target: &FsTarget,
        content: &str,
        intent: &WriteIntent,
    ) -> Result<WriteOutcome> {
        let d = &target.display_path;
        if content.len() as u64 > self.config.max_edit_file_bytes {
            return Err(FsError::TooLarge(format!(
                "cannot write \"{d}\": content of {} bytes exceeds the {}-byte limit",
                content.len(),
                self.config.max_edit_file_bytes
            )));
        }
        let _g = self.stripe(target);
        let existing = self.load_existing(target, "write")?;
        match (intent, &existing) {
            (WriteIntent::CreateIfAbsent, Some(_)) => {
                return Err(FsError::NotObserved(format!(
                    "cannot write \"{d}\": the file exists and has not been read in this session; read the file, then retry"
                )));
            }
            (WriteIntent::ReplaceIfVersion(obs), None) => return Err(stale(d, obs, None)),
            (WriteIntent::ReplaceIfVersion(obs), Some(ex)) if ex.version != obs.version => {
                return Err(stale(d, obs, Some(&ex.lf)));
            }
            _ => {}
        }
        let bytes = match &existing {
            None => content.as_bytes().to_vec(),
            Some(ex) => {
                let body = if dominant_eol(&ex.raw) == text::Eol::Crlf && !content.contains('\r') {
                    content.replace('\n', "\r\n")
                } else {
                    content.to_owned()
                };
                let mut b = Vec::with_capacity(body.len() + 3);
                if ex.bom && !body.starts_with('\u{feff}') {
                    b.extend_from_slice(BOM);
                }
                b.extend_from_slice(body.as_bytes());
                b
            }
        };
        if let Some(parent) = target.key.parent() {
            fs::create_dir_all(parent).map_err(|e| FsError::from_io("write", d, &e))?;
        }
        atomic_write(
            &target.key,
            &bytes,
            existing.as_ref().map(|e| e.perms.clone()),
            d,
        )?;
        let after = normalize_eol(content.strip_prefix('\u{feff}').unwrap_or(content));
        let before = existing.map(|e| e.lf);
        let diff = before
            .as_deref()
            .map(|b| unified_diff(d, b, &after))
            .unwrap_or_default();
        Ok(WriteOutcome {
            operation: if before.is_some() {
                WriteOperation::Update
            } else {
                WriteOperation::Create
            },
            version: FsVersion::of(&bytes),
            before,
            after,
            diff,
        })
    }

    /// Applies a literal edit to `target` atomically (see the `text` module for the matching
    /// and line-ending rule). With `guard`, the file is re-read inside the per-target critical
    /// section right before the write and must still have the observed version.
    ///
    /// # Errors
    /// [`FsError::NotFound`], [`FsError::NotRegularFile`], [`FsError::TooLarge`],
    /// [`FsError::NotText`], [`FsError::StaleVersion`] (with a diff of the change),
    /// [`FsError::InvalidArgs`], [`FsError::EditNotFound`], [`FsError::AmbiguousEdit`]
    /// (the file is untouched on every error), OS errors.
    pub fn edit_text(
        &self,
        target: &FsTarget,
        req: &EditRequest,
        guard: Option<&Observed>,
    ) -> Result<EditOutcome> {
        let d = &target.display_path;
        let _g = self.stripe(target);
        let Some(ex) = self.load_existing(target, "edit")? else {
            return match guard {
                Some(obs) => Err(stale(d, obs, None)),
                None => Err(FsError::NotFound(format!("cannot edit \"{d}\": not found"))),
            };
        };
        if let Some(obs) = guard
            && obs.version != ex.version
        {
            return Err(stale(d, obs, Some(&ex.lf)));
        }
        let applied = apply_edit(
            &ex.raw,
            &req.old_string,
            &req.new_string,
            req.replace_all,
            d,
        )?;
        let mut bytes = Vec::with_capacity(applied.raw_after.len() + 3);
        if ex.bom {
            bytes.extend_from_slice(BOM);
        }
        bytes.extend_from_slice(applied.raw_after.as_bytes());
        atomic_write(&target.key, &bytes, Some(ex.perms.clone()), d)?;
        let after = normalize_eol(&applied.raw_after);
        let diff = unified_diff(d, &ex.lf, &after);
        Ok(EditOutcome {
            version: FsVersion::of(&bytes),
            before: ex.lf,
            after,
            replacements: applied.replacements,
            diff,
        })
    }

    fn load_existing(&self, target: &FsTarget, verb: &str) -> Result<Option<Existing>> {
        let d = &target.display_path;
        let (mut file, size) = match open_regular(&target.key, verb, d) {
            Ok(f) => f,
            Err(FsError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        if size > self.config.max_edit_file_bytes {
            return Err(FsError::TooLarge(format!(
                "cannot {verb} \"{d}\": {size} bytes exceeds the {}-byte limit",
                self.config.max_edit_file_bytes
            )));
        }
        let perms = file
            .metadata()
            .map_err(|e| FsError::from_io(verb, d, &e))?
            .permissions();
        let mut bytes = Vec::with_capacity(size as usize);
        (&mut file)
            .take(self.config.max_edit_file_bytes + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| FsError::from_io(verb, d, &e))?;
        if bytes.len() as u64 > self.config.max_edit_file_bytes {
            return Err(FsError::TooLarge(format!(
                "cannot {verb} \"{d}\": content exceeds the {}-byte limit",
                self.config.max_edit_file_bytes
            )));
        }
        let dec = decode(&bytes, verb, d)?;
        Ok(Some(Existing {
            version: FsVersion::of(&bytes),
            lf: normalize_eol(&dec.text),
            raw: dec.text,
            bom: dec.bom,
            perms,
        }))
    }
}

struct Existing {
    version: FsVersion,
    raw: String,
    lf: String,
    bom: bool,
    perms: Permissions,
}

fn kind_of(m: &fs::Metadata) -> FsKind {
    if m.is_file() {
        FsKind::File
    } else if m.is_dir() {
        FsKind::Directory
    } else {
        FsKind::Other
    }
}

/// Opens a regular file for reading; returns it with its size.
fn open_regular(path: &Path, verb: &str, d: &str) -> Result<(File, u64)> {
    let m = fs::metadata(path).map_err(|e| FsError::from_io(verb, d, &e))?;
    if !m.is_file() {
        return Err(FsError::NotRegularFile(format!(
            "cannot {verb} \"{d}\": not a regular file"
        )));
    }
    let f = File::open(path).map_err(|e| FsError::from_io(verb, d, &e))?;
    Ok((f, m.len()))
}

/// The `FS_STALE_VERSION` error: cause-neutral, with a diff (at most 40 lines) of what changed
/// since the observation when a snapshot is available.
fn stale(d: &str, obs: &Observed, current: Option<&str>) -> FsError {
    let Some(current) = current else {
        return FsError::StaleVersion(format!(
            "\"{d}\" was deleted or moved since it was last read in this session; re-read the file, then retry"
        ));
    };
    let mut msg = format!(
        "\"{d}\" changed on disk since it was last read in this session; re-read the file, then retry"
    );
    match &obs.snapshot {
        Some(snap) => {
            let diff = unified_diff(d, snap, current);
            let lines: Vec<&str> = diff.lines().collect();
            msg.push_str("\nChange since last read:\n");
            msg.push_str(&lines[..lines.len().min(40)].join("\n"));
            if lines.len() > 40 {
                msg.push_str(&format!("\n… ({} more diff lines)", lines.len() - 40));
            }
        }
        None => msg.push_str("\n(no diff: the file was too large to keep a snapshot of the read)"),
    }
    FsError::StaleVersion(msg)
}

/// Writes `bytes` to `path` through a temp file in the same directory: create-new (0600, or
/// 0666 & umask for a new file), write, chmod to `perms`, fsync, rename over `path`, fsync the
/// directory (best effort). The temp file is removed on failure.
fn atomic_write(path: &Path, bytes: &[u8], perms: Option<Permissions>, d: &str) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.dsh-tmp", uuid::Uuid::new_v4().simple()));
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if perms.is_some() { 0o600 } else { 0o666 });
    }
    let res = (|| -> io::Result<()> {
        let mut f = opts.open(&tmp)?;
        f.write_all(bytes)?;
        if let Some(p) = perms {
            f.set_permissions(p)?;
        }
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = res {
        let _ = fs::remove_file(&tmp);
        return Err(FsError::from_io("write", d, &e));
    }
    if let Err(e) = File::open(dir).and_then(|f| f.sync_all()) {
        tracing::debug!(target: "dsh_fs", "directory fsync of {} failed: {e}", dir.display());
    }
    Ok(())
}

/// Folds `.` and `..` lexically (no I/O); used only for the display path.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The real path of absolute `p`, following symlinks component by component like the OS;
/// components that do not exist are appended as-is.
fn real_path(p: &Path, d: &str, depth: u32) -> Result<PathBuf> {
    if depth > 40 {
        return Err(FsError::Io(format!(
            "cannot resolve \"{d}\": too many levels of symbolic links"
        )));
    }
    let mut real = PathBuf::new();
    let mut missing = false;
    for c in p.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => real.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                real.pop();
            }
            Component::Normal(name) => {
                let cand = real.join(name);
                if missing {
                    real = cand;
                    continue;
                }
                match fs::symlink_metadata(&cand) {
                    Ok(m) if m.file_type().is_symlink() => {
                        let link =
                            fs::read_link(&cand).map_err(|e| FsError::from_io("resolve", d, &e))?;
                        let next = if link.is_absolute() {
                            link
                        } else {
                            real.join(link)
                        };
                        real = real_path(&next, d, depth + 1)?;
                    }
                    Ok(_) => real = cand,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                        ) =>
                    {
                        missing = true;
                        real = cand;
                    }
                    Err(e) => return Err(FsError::from_io("resolve", d, &e)),
                }
            }
        }
    }
    Ok(real)
}
