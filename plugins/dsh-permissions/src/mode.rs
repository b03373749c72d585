//! The presets themselves ([`PermissionMode`]) and the settings section naming the one in force
//! ([`PermissionsConfig`]).

use serde::{Deserialize, Serialize};

use crate::PermissionsError;

/// A permission preset. Serialized kebab-case: `read-only`, `workspace-write`,
/// `danger-full-access`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    /// Only tools declared read-only run.
    ReadOnly,
    /// Writes and `bash` inside the workspace run; outside asks. The default.
    #[default]
    WorkspaceWrite,
    /// Everything runs.
    DangerFullAccess,
}

impl PermissionMode {
    /// Every mode, strictest first.
    pub const ALL: [PermissionMode; 3] = [
        PermissionMode::ReadOnly,
        PermissionMode::WorkspaceWrite,
        PermissionMode::DangerFullAccess,
    ];

    /// The wire/CLI name (`read-only`, `workspace-write`, `danger-full-access`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::DangerFullAccess => "danger-full-access",
        }
    }
}

impl std::fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PermissionMode {
    type Err = PermissionsError;

    /// Parses a wire name.
    ///
    /// # Errors
    /// [`PermissionsError::UnknownMode`] for any other string.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| PermissionsError::UnknownMode(s.to_owned()))
    }
}

/// The `dsh-permissions` settings section: `{"permission_mode": "read-only" |
/// "workspace-write" | "danger-full-access"}` (default `workspace-write`; unknown fields are
/// rejected; `mode` is accepted as an alias). It is also the top-level key `permission_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PermissionsConfig {
    /// The preset in force for every agent.
    #[serde(alias = "mode")]
    pub permission_mode: PermissionMode,
}
