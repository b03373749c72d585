//! Durable file primitives of the JSONL backend: no-overwrite publish of a new log, append with
//! fsync and truncate-back on failure, truncation for repair, and the per-session lock file.
//!
//! Behaviour: `docs/persistence.md` ("JSONL backend": the first append publishes via temp file +
//! fsync + no-overwrite link; later appends append + fsync, truncating back on failure).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use dsh_persistence::{PersistenceError, Result};

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Fsyncs a directory so a new/renamed entry in it is durable (no-op where unsupported).
///
/// # Errors
/// [`PersistenceError::Io`] (`"fsync-dir"`).
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        let f = File::open(dir).map_err(|e| PersistenceError::io("open-dir", dir, e))?;
        f.sync_all()
            .map_err(|e| PersistenceError::io("fsync-dir", dir, e))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Creates `dir` and its parents, fsyncing each newly created directory's parent.
///
/// # Errors
/// [`PersistenceError::Io`] (`"create-dir"`).
pub fn create_dir_durable(dir: &Path) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_durable(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(PersistenceError::io("create-dir", dir, e)),
    }
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// Publishes a new file at `target` holding exactly `bytes`, durably and without overwriting:
/// write a temp file in the same directory, fsync it, hard-link it to `target` (fails if `target`
/// exists), unlink the temp name, fsync the directory. Returns the open file (append mode).
///
/// # Errors
/// [`PersistenceError::AlreadyExists`] when `target` exists (nothing is changed);
/// [`PersistenceError::Io`] otherwise (the temp file is removed).
pub fn publish_new(target: &Path, bytes: &[u8], id: &str) -> Result<File> {
    let dir = target
        .parent()
        .ok_or_else(|| PersistenceError::InvalidArgument {
            detail: format!("{} has no parent directory", target.display()),
        })?;
    create_dir_durable(dir)?;
    let temp = dir.join(format!(
        ".{}.tmp-{}-{}",
        target.file_name().and_then(|n| n.to_str()).unwrap_or("log"),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| PersistenceError::io("create-temp", &temp, e))?;
        f.write_all(bytes)
            .map_err(|e| PersistenceError::io("write", &temp, e))?;
        f.sync_all()
            .map_err(|e| PersistenceError::io("fsync", &temp, e))?;
        match std::fs::hard_link(&temp, target) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(PersistenceError::AlreadyExists { id: id.to_owned() })
            }
            Err(e) => Err(PersistenceError::io("link", target, e)),
        }
    })();
    let _ = std::fs::remove_file(&temp);
    result?;
    sync_dir(dir)?;
    OpenOptions::new()
        .append(true)
        .open(target)
        .map_err(|e| PersistenceError::io("open", target, e))
}

/// Appends `bytes` to `file` (whose durable length is `committed_len`) and fsyncs it. On any
/// failure the file is truncated back to `committed_len` (best effort) so a partial record never
/// stays behind. Returns the new committed length in bytes.
///
/// # Errors
/// [`PersistenceError::Io`] (`"append"`/`"fsync"`).
pub fn append_durable(
    file: &mut File,
    path: &Path,
    committed_len: u64,
    bytes: &[u8],
) -> Result<u64> {
    let result = file
        .write_all(bytes)
        .map_err(|e| PersistenceError::io("append", path, e))
        .and_then(|()| {
            file.sync_data()
                .map_err(|e| PersistenceError::io("fsync", path, e))
        });
    match result {
        Ok(()) => Ok(committed_len + bytes.len() as u64),
        Err(e) => {
            if file.set_len(committed_len).is_ok() {
                let _ = file.sync_all();
            }
            Err(e)
        }
    }
}

/// Truncates the file at `path` to `len` bytes and fsyncs it (crash repair of a torn tail).
///
/// # Errors
/// [`PersistenceError::Io`] (`"truncate"`).
pub fn truncate_durable(path: &Path, len: u64) -> Result<()> {
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| PersistenceError::io("open", path, e))?;
    f.set_len(len)
        .map_err(|e| PersistenceError::io("truncate", path, e))?;
    f.sync_all()
        .map_err(|e| PersistenceError::io("fsync", path, e))
}

/// An exclusive advisory lock on `<session dir>/session.lock`, held while a process writes a
/// session; released on drop (and by the OS when the process dies, e.g. after `kill -9`).
#[derive(Debug)]
pub struct SessionLock {
    _file: File,
}

impl SessionLock {
    /// Creates the session directory if needed and takes the lock without waiting.
    ///
    /// # Errors
    /// [`PersistenceError::Locked`] when another open file description (this or another process)
    /// holds it; [`PersistenceError::Io`] otherwise.
    pub fn acquire(session_dir: &Path, id: &str) -> Result<Self> {
        create_dir_durable(session_dir)?;
        let path = session_dir.join(crate::path::LOCK_FILE_NAME);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| PersistenceError::io("open-lock", &path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(Self { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(PersistenceError::Locked {
                id: id.to_owned(),
                path,
            }),
            Err(std::fs::TryLockError::Error(e)) => Err(PersistenceError::io("lock", &path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_kernel::ErrorCode;

    #[test]
    fn publish_refuses_overwrite_and_append_extends() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a/b/session.jsonl");
        let mut f = publish_new(&target, b"h\n", "s").unwrap();
        assert_eq!(
            publish_new(&target, b"x\n", "s").unwrap_err().code(),
            "SESSION_ALREADY_EXISTS"
        );
        let len = append_durable(&mut f, &target, 2, b"e1\n").unwrap();
        assert_eq!(len, 5);
        assert_eq!(std::fs::read(&target).unwrap(), b"h\ne1\n");
        truncate_durable(&target, 2).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"h\n");
        let leftovers: Vec<_> = std::fs::read_dir(target.parent().unwrap())
            .unwrap()
            .collect();
        assert_eq!(leftovers.len(), 1);
    }

    #[test]
    fn lock_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        let l1 = SessionLock::acquire(dir.path(), "s").unwrap();
        assert_eq!(
            SessionLock::acquire(dir.path(), "s").unwrap_err().code(),
            "SESSION_LOCKED"
        );
        drop(l1);
        let _l2 = SessionLock::acquire(dir.path(), "s").unwrap();
    }
}
