//! What a request ends with: the outcome vocabulary ([`ApprovalOutcome`]) and the answers an
//! `approval/request` listener may give ([`ApprovalAnswer`]).

use serde::{Deserialize, Serialize};

/// The outcome of one request. JSON: `"allowed-once" | "rejected" | "cancelled" |
/// "unavailable"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalOutcome {
    /// The one grant: this call may run.
    AllowedOnce,
    /// A human said no.
    Rejected,
    /// The request was aborted before an answer.
    Cancelled,
    /// Nobody could answer (no answerer, it failed, or it answered outside the vocabulary).
    Unavailable,
}

impl ApprovalOutcome {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllowedOnce => "allowed-once",
            Self::Rejected => "rejected",
            Self::Cancelled => "cancelled",
            Self::Unavailable => "unavailable",
        }
    }

    /// Parses a wire string; `None` outside the vocabulary.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "allowed-once" => Some(Self::AllowedOnce),
            "rejected" => Some(Self::Rejected),
            "cancelled" => Some(Self::Cancelled),
            "unavailable" => Some(Self::Unavailable),
            _ => None,
        }
    }
}

/// What an `approval/request` listener returns: an outcome, or a raw answer a bridge received
/// (mapped through [`ApprovalOutcome::parse`]; anything outside the vocabulary ⇒ `unavailable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalAnswer {
    /// A typed outcome.
    Outcome(ApprovalOutcome),
    /// A raw wire answer.
    Other(String),
    /// `rejected`, with the person's reason for the model: the outcome is
    /// [`ApprovalOutcome::Rejected`] (logged as such), and the reason is kept for the tool
    /// pipeline's denial text ([`crate::ApprovalService::take_rejection_reason`]).
    RejectedBecause(String),
}

impl From<ApprovalOutcome> for ApprovalAnswer {
    fn from(o: ApprovalOutcome) -> Self {
        Self::Outcome(o)
    }
}
