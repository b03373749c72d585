//! The typed error of the filesystem service: one variant per stable `FS_*` code
//! (see `docs/upstream/fs.md`, "Codes").

use std::path::PathBuf;

/// A filesystem failure with a stable machine-routable [`code`](dsh_kernel::ErrorCode::code).
///
/// Messages are model-facing: they name the display path and, for the guarded-mutation
/// codes, the only correct recovery ("read the file, then retry").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum FsError {
    /// `FS_NOT_FOUND`: the target (or a parent) does not exist, or a read offset is past EOF.
    #[error("{0}")]
    #[code("FS_NOT_FOUND")]
    NotFound(String),
    /// `FS_NOT_DIRECTORY`: a path component that must be a directory is not one.
    #[error("{0}")]
    #[code("FS_NOT_DIRECTORY")]
    NotDirectory(String),
    /// `FS_NOT_TEXT`: binary content (NUL in the first 8 KiB) or invalid UTF-8.
    #[error("{0}")]
    #[code("FS_NOT_TEXT")]
    NotText(String),
    /// `FS_NOT_REGULAR_FILE`: the target is a directory, device, socket or FIFO.
    #[error("{0}")]
    #[code("FS_NOT_REGULAR_FILE")]
    NotRegularFile(String),
    /// `FS_TOO_LARGE`: the file or the content exceeds a configured byte cap.
    #[error("{0}")]
    #[code("FS_TOO_LARGE")]
    TooLarge(String),
    /// `FS_PERMISSION_DENIED`: the OS refused access.
    #[error("{0}")]
    #[code("FS_PERMISSION_DENIED")]
    PermissionDenied(String),
    /// `FS_OUTSIDE_WORKSPACE`: the resolved real path is outside the session workspace and every
    /// granted read root (a `../` escape, an absolute path elsewhere, or a symlink pointing out).
    #[error("{message}")]
    #[code("FS_OUTSIDE_WORKSPACE")]
    OutsideWorkspace {
        /// Model-facing message.
        message: String,
        /// The canonical path that was refused.
        real_path: PathBuf,
    },
    /// `FS_IO_ERROR`: any other I/O failure.
    #[error("{0}")]
    #[code("FS_IO_ERROR")]
    Io(String),
    /// `FS_STALE_VERSION`: the file changed on disk since this session last read it (or was
    /// deleted). The message carries a short diff of the change and says to re-read.
    #[error("{0}")]
    #[code("FS_STALE_VERSION")]
    StaleVersion(String),
    /// `FS_NOT_OBSERVED`: a mutation of an existing file that this session has not read.
    #[error("{0}")]
    #[code("FS_NOT_OBSERVED")]
    NotObserved(String),
    /// `FS_AMBIGUOUS_EDIT`: `old_string` matched more than once without `replace_all`; the
    /// message gives the match count (overlapping matches counted), lines and previews.
    #[error("{0}")]
    #[code("FS_AMBIGUOUS_EDIT")]
    AmbiguousEdit(String),
    /// `FS_EDIT_NOT_FOUND`: `old_string` does not occur in the file.
    #[error("{0}")]
    #[code("FS_EDIT_NOT_FOUND")]
    EditNotFound(String),
    /// `FS_ABORTED`: the caller cancelled the operation (checked between read chunks).
    #[error("{0}")]
    #[code("FS_ABORTED")]
    Aborted(String),
    /// `FS_INVALID_ARGS`: a request the service cannot act on (empty path, empty `old_string`,
    /// `old_string == new_string`, offset or limit 0). Not an upstream code: upstream throws an
    /// untyped error there.
    #[error("{0}")]
    #[code("FS_INVALID_ARGS")]
    InvalidArgs(String),
}

impl FsError {
    /// Maps an OS error for operation `verb` on `display` to the matching variant
    /// (`NotFound`, `PermissionDenied`, `NotDirectory`, else `Io`).
    pub fn from_io(verb: &str, display: &str, e: &std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::NotFound => Self::NotFound(format!("cannot {verb} \"{display}\": not found")),
            K::PermissionDenied => {
                Self::PermissionDenied(format!("cannot {verb} \"{display}\": permission denied"))
            }
            K::NotADirectory => Self::NotDirectory(format!(
                "cannot {verb} \"{display}\": a parent path segment is not a directory"
            )),
            K::IsADirectory => {
                Self::NotRegularFile(format!("cannot {verb} \"{display}\": not a regular file"))
            }
            _ => Self::Io(format!("cannot {verb} \"{display}\": {e}")),
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = FsError> = std::result::Result<T, E>;
