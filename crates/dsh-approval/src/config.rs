//! The policy ([`ApprovalPolicy`]) and the `dsh-approval` settings section ([`ApprovalConfig`]).

use serde::{Deserialize, Serialize};

/// `ask` (default) or `never`. JSON: `"ask" | "never"`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalPolicy {
    /// Ask the answerers.
    #[default]
    Ask,
    /// Reject every request without asking.
    Never,
}

/// The `dsh-approval` settings section. JSON: `{"policy": "ask" | "never"}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    /// The configured policy (used when the log holds no `approval/policy`).
    #[serde(default)]
    pub policy: ApprovalPolicy,
}
