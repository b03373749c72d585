//! The `read`, `write` and `edit` tools (upstream `@deepseek-ai/dsh-tool-fs`) over the
//! filesystem service [`dsh_fs::FsService`] (`ctx.fs`), which this plugin provides when no other
//! plugin did. Behaviour notes and upstream sources: `docs/tools.md` ("File tools").
//!
//! - Relative paths resolve against the calling session's `cwd` (the header's, else this
//!   plugin's `workspace` setting, else the run's workspace root, else the process working
//!   directory), and are fenced by the workspace root ([`dsh_fs::Workspace::for_context`]: the
//!   run's root, `-C DIR` or the nearest `.git` ancestor, when it contains the cwd), so from a
//!   repository's subdirectory `../x` is inside. A real path outside the root (`../` past it,
//!   absolute elsewhere, a symlink pointing out) fails with
//!   `FS_OUTSIDE_WORKSPACE`, except reads inside a root granted with
//!   [`dsh_fs::FsService::grant_read_root`] (how spill files become readable).
//! - `read {file_path, offset?, limit?}` returns the upstream envelope with `N: text` lines
//!   (see [`dsh_fs::text::format_read`]); parallel-safe. Caps: `read_limit` lines (default and
//!   maximum 2000), `read_max_line_length` chars per line (2000), `read_max_bytes` of selected text
//!   (50 KiB).
//! - `write {file_path, content}` and `edit {file_path, old_string, new_string, replace_all?}`
//!   are exclusive. With `require_read_before_write` (default true) an overwriting `write` and
//!   every `edit` need a prior `read` of the current version in the same session
//!   (`FS_NOT_OBSERVED`, `FS_STALE_VERSION` — both messages say to read again); creating a new
//!   file needs no read. Own writes refresh the observation, so consecutive edits need no re-read.
//! - Failures are typed results: `error.info = {name: "FsError", code: "FS_*"}`.
//! - `meta`: read → `{path, offset, lines:[{number,text}], totalLines, lang?}`; write →
//!   `{path, operation, diff}`; edit → `{path, replacements, diff}` where `diff` is a unified
//!   diff (3 lines of context) of the LF-normalised text, long lines cut to the change plus
//!   [`dsh_fs::text::DIFF_CONTEXT_BYTES`] on each side (see [`dsh_fs::text::unified_diff`]).
//!   A `write` whose diff is longer than [`WRITE_DIFF_MAX_BYTES`] stores
//!   `{path, operation, diffStat: {addedLines, removedLines, diffBytes}}` instead.
//!
//! Settings section `dsh-tool-fs` (snake_case keys, all optional, unknown keys rejected):
//! `workspace`, `read_limit`, `read_max_line_length`, `read_max_bytes`, `max_read_file_bytes`,
//! `max_edit_file_bytes`, `allow_outside_workspace`, `allow_read_outside_workspace`,
//! `require_read_before_write`.

mod tools;

pub use tools::{
    EditArgs, EditValue, FsToolsConfig, LineValue, ReadArgs, ReadValue, WRITE_DIFF_MAX_BYTES,
    WriteArgs, WriteValue, fs_failure, lang_from_path,
};

/// The plugin id (= package name).
pub const PLUGIN_ID: &str = "dsh-tool-fs";

fn apply(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    let config: FsToolsConfig = ctx.settings_section(PLUGIN_ID)?;
    tools::install(ctx, config)
}

dsh_kernel::plugin! {
    after = [dsh_tools::PLUGIN],
    settings = FsToolsConfig,
    // It widens its fence under `danger-full-access`; dsh-permissions enforces the mode.
    observes = ["permission_mode"],
    restricted = [
        "permission_mode",
        "allow_outside_workspace",
        "allow_read_outside_workspace",
    ],
    start = apply,
}
