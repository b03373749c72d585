//! The `dsh-tool-todo` settings section ([`TodoConfig`]).

use schemars::JsonSchema;
use serde::Deserialize;

/// Settings (section `dsh-tool-todo`, snake_case keys, unknown keys rejected):
/// `{"allow_parallel_in_progress": bool}` (default false).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TodoConfig {
    /// Allow several `in_progress` items at once.
    pub allow_parallel_in_progress: bool,
}
