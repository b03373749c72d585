//! The search tools of dsh: `grep` (regex over file contents) and `glob` (file discovery by
//! path pattern), built on the ripgrep crates (`ignore`, `globset`, `grep-regex`,
//! `grep-searcher`) with parallel directory walking. Both are read-only and parallel-safe;
//! paths resolve against the workspace root and may not escape it.
//!
//! Spec: `../shared/spec/tools.md`; upstream `packages/fs/tool-fs-search` (parameters, caps,
//! output wording).

mod error;
pub mod glob;
pub mod grep;
pub mod paths;

pub use error::SearchError;
pub use glob::{GlobOptions, GlobOutput, GlobRequest};
pub use grep::{GrepMatch, GrepOptions, GrepOutput, GrepRequest};
