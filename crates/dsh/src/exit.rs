//! The process exit codes of `dsh`, and the one-line stderr messages that go with them, decided
//! in one place.
//!
//! | exit | meaning |
//! | --- | --- |
//! | [`COMPLETED`] 0 | the turn completed (or the command succeeded) |
//! | [`FAILURE`] 1 | the turn ended with an error, or the command failed |
//! | [`USAGE`] 2 | a usage or configuration error (bad flags, settings, plugin start-up) |
//! | [`MAX_TOKENS`] 3 | the turn stopped at the output-token limit |
//! | [`BLOCKED`] 4 | a pre-step policy blocked the turn |
//! | [`MAX_STEPS`] 5 | the turn stopped at the step limit (`--max-steps`, `[agent] max_steps_per_turn`) |
//! | [`CANCELLED`] 130 | the turn was cancelled (Ctrl-C, SIGTERM) |
//!
//! A turn's exit code comes from its `turn/end` reason ([`for_turn_end`]); a failure before or
//! around the turn from its error ([`for_error`]): an `app::UsageError`, else the stable code
//! ([`dsh_kernel::ErrorCode`]) of the first coded error in its chain ([`exit_code_for`]).

use dsh_agent::RegistryError;
use dsh_agent_loop::LoopError;
use dsh_kernel::{ErrorCode, KernelError};
use dsh_session::TurnEndReason;

use crate::app::UsageError;

/// The turn completed, or the command succeeded.
pub const COMPLETED: i32 = 0;
/// The turn ended with an error, or the command failed for a reason that is not usage.
pub const FAILURE: i32 = 1;
/// A usage or configuration error.
pub const USAGE: i32 = 2;
/// The turn stopped at the output-token limit (`max-tokens`).
pub const MAX_TOKENS: i32 = 3;
/// A pre-step policy blocked the turn (`blocked`).
pub const BLOCKED: i32 = 4;
/// The turn stopped at the step limit (`max-steps`, a dsh reason: see
/// `dsh_agent_loop::max_steps_reason`).
pub const MAX_STEPS: i32 = 5;
/// The turn was cancelled (`aborted`): 128 + SIGINT, as shells report an interrupted command.
pub const CANCELLED: i32 = 130;

/// The code [`exit_code_for`] knows an [`UsageError`] by (it has no [`ErrorCode`] of its own).
pub const USAGE_CODE: &str = "USAGE";

/// Stable error codes that are usage or configuration errors (exit [`USAGE`]). Every other code
/// is exit [`FAILURE`].
const USAGE_CODES: &[&str] = &[
    USAGE_CODE,
    // dsh-kernel: a settings section does not deserialize into its plugin's type.
    "INVALID_SETTINGS",
    // dsh-kernel: a plugin failed to start (on configuration it cannot use).
    "PLUGIN_FAILED",
    // dsh-kernel: `plugins.disable` names a plugin outside the booted set.
    "UNKNOWN_PLUGIN",
    // dsh-agent: no agent loop in the booted set (disabled, or not in the harness's preset).
    "NO_AGENT_FACTORY",
    // dsh-permissions: `--permission-mode` / `permissions.mode` names no mode.
    "UNKNOWN_PERMISSION_MODE",
    // dsh-llm-retry: a configured retry policy is invalid.
    "INVALID_RETRY_POLICY",
    // dsh-llm-deepseek: a route's base_url (or DEEPSEEK_BASE_URL) is not an http(s) URL. It
    // reaches `dsh` inside the kernel's PLUGIN_FAILED, listed here for any path that reports it
    // by its own code.
    "INVALID_BASE_URL",
    // dsh-system-prompt: the configured `tool_order` is invalid or names unknown tools.
    "INVALID_TOOL_ORDER",
    "UNKNOWN_TOOL_IN_ORDER",
    // dsh-agent-loop: a resume without session persistence.
    "NO_PERSISTENCE",
    // dsh-persistence: a session id prefix that names no stored session, or several.
    "SESSION_NOT_FOUND",
    "SESSION_ID_AMBIGUOUS",
];

/// The exit code for a failure with the stable error `code`: [`USAGE`] for the usage and
/// configuration codes listed in this module, else [`FAILURE`].
pub fn exit_code_for(code: &str) -> i32 {
    if USAGE_CODES.contains(&code) {
        USAGE
    } else {
        FAILURE
    }
}

/// The stable code of `e`: [`USAGE_CODE`] for an [`UsageError`], else the code of the first
/// error in its chain that has one (kernel, agent registry, agent loop and session-id lookup
/// errors), else `None`.
pub fn code_of(e: &anyhow::Error) -> Option<&'static str> {
    e.chain().find_map(|cause| {
        if cause.is::<UsageError>() {
            Some(USAGE_CODE)
        } else if let Some(k) = cause.downcast_ref::<KernelError>() {
            Some(k.code())
        } else if let Some(l) = cause.downcast_ref::<LoopError>() {
            Some(ErrorCode::code(l))
        } else if let Some(l) = cause.downcast_ref::<dsh_persistence::IdLookupError>() {
            Some(ErrorCode::code(l))
        } else {
            cause
                .downcast_ref::<RegistryError>()
                .map(|r| ErrorCode::code(r))
        }
    })
}

/// The exit code for a failed command (an `Err` out of a subcommand): [`exit_code_for`] of
/// [`code_of`], [`FAILURE`] when the error has no code.
pub fn for_error(e: &anyhow::Error) -> i32 {
    code_of(e).map_or(FAILURE, exit_code_for)
}

/// The stderr line for a failed command: `error: <message and causes>` (no trailing newline).
pub fn error_line(e: &anyhow::Error) -> String {
    format!("error: {e:#}")
}

/// The exit code for the reason of a run's last `turn/end` (`None`: no turn ended, e.g. an
/// empty inbox): 0 completed or none, 3 max-tokens, 4 blocked, 5 max-steps, 130 aborted, 1 otherwise
/// (error, interrupted, disposed, unknown kinds). A turn error is always 1, whatever its code.
pub fn for_turn_end(reason: Option<&TurnEndReason>) -> i32 {
    match reason {
        Some(TurnEndReason::Completed) | None => COMPLETED,
        Some(TurnEndReason::MaxTokens) => MAX_TOKENS,
        Some(TurnEndReason::Blocked) => BLOCKED,
        Some(TurnEndReason::Aborted { .. }) => CANCELLED,
        Some(r) if dsh_agent_loop::max_steps_limit(r).is_some() => MAX_STEPS,
        Some(_) => FAILURE,
    }
}

/// The stderr line (text mode) for the reason of a run's last `turn/end`, if it has one:
/// `error: <message> (<code>)` for an error, `stopped at the output-token limit` for
/// max-tokens, `stopped at the step limit (N steps)` for max-steps (no trailing newline).
pub fn turn_end_line(reason: Option<&TurnEndReason>) -> Option<String> {
    match reason {
        Some(TurnEndReason::Error { error }) => {
            Some(format!("error: {} ({})", error.message, error.code))
        }
        Some(TurnEndReason::MaxTokens) => Some("stopped at the output-token limit".to_owned()),
        Some(r) => dsh_agent_loop::max_steps_limit(r)
            .map(|n| format!("stopped at the step limit ({n} steps)")),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use dsh_llm::LlmFailure;

    use super::*;

    #[test]
    fn turn_end_reasons_map_to_todays_exit_codes() {
        let error = TurnEndReason::Error {
            error: LlmFailure::new("PLUGIN_PANICKED", "boom"),
        };
        let cases = [
            (None, 0),
            (Some(TurnEndReason::Completed), 0),
            (Some(error), 1),
            (Some(TurnEndReason::MaxTokens), 3),
            (Some(TurnEndReason::Blocked), 4),
            (Some(TurnEndReason::Aborted { reason: None }), 130),
            (Some(dsh_agent_loop::max_steps_reason(7)), 5),
            (Some(TurnEndReason::Interrupted), 1),
            (Some(TurnEndReason::Disposed), 1),
        ];
        for (reason, code) in cases {
            assert_eq!(for_turn_end(reason.as_ref()), code, "{reason:?}");
        }
    }

    #[test]
    fn turn_end_lines() {
        let error = TurnEndReason::Error {
            error: LlmFailure::new(
                "REQUEST_LISTENER_FAILED",
                "agent/request listener failed: x",
            ),
        };
        assert_eq!(
            turn_end_line(Some(&error)).unwrap(),
            "error: agent/request listener failed: x (REQUEST_LISTENER_FAILED)"
        );
        assert_eq!(
            turn_end_line(Some(&TurnEndReason::MaxTokens)).unwrap(),
            "stopped at the output-token limit"
        );
        assert_eq!(
            turn_end_line(Some(&dsh_agent_loop::max_steps_reason(7))).unwrap(),
            "stopped at the step limit (7 steps)"
        );
        assert_eq!(turn_end_line(Some(&TurnEndReason::Completed)), None);
        assert_eq!(turn_end_line(None), None);
    }

    #[test]
    fn codes_map_to_usage_or_failure() {
        assert_eq!(exit_code_for("USAGE"), 2);
        assert_eq!(exit_code_for("INVALID_SETTINGS"), 2);
        assert_eq!(exit_code_for("PLUGIN_FAILED"), 2);
        assert_eq!(exit_code_for("NO_PERSISTENCE"), 2);
        assert_eq!(exit_code_for("INVALID_BASE_URL"), 2);
        assert_eq!(exit_code_for("SESSION_APPEND_FAILED"), 1);
        assert_eq!(exit_code_for("UNKNOWN"), 1);
        assert_eq!(exit_code_for(""), 1);
    }

    #[test]
    fn errors_map_through_their_chain() {
        let usage = anyhow::Error::new(UsageError("the prompt is empty".into()));
        assert_eq!(code_of(&usage), Some("USAGE"));
        assert_eq!(for_error(&usage), 2);
        assert_eq!(error_line(&usage), "error: the prompt is empty");

        let settings = anyhow::Error::new(KernelError::InvalidSettings {
            section: "dsh-agent-loop".into(),
            message: "unknown field `x`".into(),
        })
        .context("booting");
        assert_eq!(code_of(&settings), Some("INVALID_SETTINGS"));
        assert_eq!(for_error(&settings), 2);
        assert_eq!(
            error_line(&settings),
            "error: booting: invalid settings for `dsh-agent-loop`: unknown field `x`"
        );

        let resume = anyhow::Error::new(LoopError::NoPersistence("s1".into()));
        assert_eq!(for_error(&resume), 2);
        let registry = anyhow::Error::new(RegistryError::NoFactory);
        assert_eq!(code_of(&registry), Some("NO_AGENT_FACTORY"));
        assert_eq!(for_error(&registry), 2);
        let plain = anyhow::anyhow!("disk full");
        assert_eq!(code_of(&plain), None);
        assert_eq!(for_error(&plain), 1);
    }
}
