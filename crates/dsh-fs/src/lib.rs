//! The dsh filesystem service (`ctx.fs`, see `docs/upstream/fs.md`): a
//! core crate so tools and policies (e.g. `dsh-tool-fs`, `dsh-spill`) share it without
//! depending on each other.
//!
//! - [`FsService`]: the local provider. [`FsService::resolve`] turns a model path into an
//!   [`FsTarget`]: relative to the session's `cwd`, fenced by the workspace root
//!   ([`Workspace`]: the two differ when dsh starts in a subdirectory of a repository); [`FsService::read_text`]
//!   streams a bounded line window; [`FsService::write_text`] and [`FsService::edit_text`]
//!   write atomically (temp file in the same directory + fsync + rename, permission bits kept)
//!   under an optional version guard.
//! - [`Observations`]: per-session read-before-write state: `edit` and overwriting `write`
//!   need a prior read of the current version (`FS_NOT_OBSERVED`, `FS_STALE_VERSION`).
//! - [`text`]: binary detection, the BOM / CRLF / tab normalisation rule shared by read and
//!   edit (documented there), the read envelope and unified diffs (the `similar` crate).
//!
//! # Security: workspace containment and read grants
//! A path is resolved like the OS would (each symlink followed) and its *real* path must be
//! inside the session's workspace root ([`Workspace::root`]). `../x`, an absolute path elsewhere (`/etc/passwd`) and a
//! symlink inside the workspace pointing outside are all refused with `FS_OUTSIDE_WORKSPACE`
//! ([`FsError::OutsideWorkspace`]) unless the [`FsConfig`] policy allows it
//! (`allow_outside_workspace`, `allow_read_outside_workspace`). Other plugins may grant *read*
//! access to extra roots with [`FsService::grant_read_root`] `(ctx, path) -> Registration`;
//! the grant lasts until the registration is dropped or its scope disposed. This is how the
//! spill policy makes its session spill directory readable by the `read` tool. Writes never
//! use grants.
//!
//! # Versions
//! [`FsVersion`] is `sha256:<hex>` of the file bytes, so staleness is decided on content, not
//! mtime (a touch is not a change, BC-15).

pub mod error;
mod observe;
mod service;
pub mod text;
pub mod workspace;

pub use error::{FsError, Result};
pub use observe::{Observation, Observations};
pub use service::{
    Access, EditOutcome, EditRequest, FsConfig, FsInfo, FsKind, FsService, FsTarget, FsVersion,
    Observed, ReadOutcome, SNAPSHOT_MAX_BYTES, WriteIntent, WriteOperation, WriteOutcome,
};
pub use text::{ReadWindow, WindowCaps, WindowLine};
pub use workspace::{WORKSPACE_FACT, Workspace, git_ancestor};
