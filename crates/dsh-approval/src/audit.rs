//! The payloads of the three log-only audit events: `approval/asked` ([`AskedData`]),
//! `approval/decided` ([`DecidedData`]) and `approval/policy` ([`PolicyData`]).

use serde::{Deserialize, Serialize};

use crate::{ApprovalOutcome, ApprovalPolicy};

/// Payload of `approval/asked`. JSON: `{"id","toolName","callId"?,"reason"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AskedData {
    /// The request id.
    pub id: String,
    /// The tool name.
    pub tool_name: String,
    /// The call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Payload of `approval/decided`. JSON: `{"id","outcome"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecidedData {
    /// The request id.
    pub id: String,
    /// The outcome.
    pub outcome: ApprovalOutcome,
}

/// Payload of `approval/policy`. JSON: `{"policy","source"?:"delegation"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyData {
    /// The new policy.
    pub policy: ApprovalPolicy,
    /// `delegation` when inherited from a parent agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}
