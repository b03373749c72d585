//! Decoding what a hook process said ([`parse_output`]) and merging the outputs of every hook
//! that ran on one point ([`merge`]). See docs/upstream/hooks.md ("Output decoding").

use serde_json::Value;

use crate::config::{Dialect, HookEvent};
use crate::records::RecordDecision;

/// A hook's raw decision, as its output spelled it (also the record's `decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RawDecision {
    /// `decision: "block"` or exit code 2.
    Block,
    /// `permissionDecision: "deny"`.
    Deny,
    /// `permissionDecision: "ask"`.
    Ask,
    /// `permissionDecision: "allow"`.
    Allow,
    /// `decision: "approve"`.
    Approve,
}

impl RawDecision {
    /// The wire name (`block`, `deny`, `ask`, `allow`, `approve`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Block => "block",
            Self::Deny => "deny",
            Self::Ask => "ask",
            Self::Allow => "allow",
            Self::Approve => "approve",
        }
    }

    /// Merge rank: deny/block 3 > ask 2 > allow/approve 1.
    pub fn rank(self) -> u8 {
        match self {
            Self::Block | Self::Deny => 3,
            Self::Ask => 2,
            Self::Allow | Self::Approve => 1,
        }
    }
}

/// How stdout was read (for the log line of a hook whose output was ignored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StdoutForm {
    /// Nothing on stdout (after trimming).
    Empty,
    /// Exactly one JSON object.
    Json,
    /// Starts with `{` but is not exactly one JSON object (e.g. two objects): ignored.
    NotOneObject(String),
    /// Plain text (`SessionStart` / `UserPromptSubmit`: became `additionalContext`).
    Text,
    /// More than the runner reads (`runner::OUTPUT_MAX_BYTES`, bytes): not decoded. A
    /// PreToolUse hook's output then denies the call (fails closed).
    TooLong(usize),
}

/// One hook's decoded output.
#[derive(Debug, Clone, PartialEq)]
pub struct HookOutput {
    /// The process's exit code (`None`: killed by a signal, timed out, or never started).
    pub exit_code: Option<i32>,
    /// The raw decision, if any.
    pub decision: Option<RawDecision>,
    /// The reason (exit 2: stderr; JSON: `reason`, overridden by `permissionDecisionReason`).
    pub reason: Option<String>,
    /// `hookSpecificOutput.additionalContext` (or plain stdout on the two context
    /// events).
    pub additional_context: Option<String>,
    /// `systemMessage` (parsed, shown to the user, not sent to the model).
    pub system_message: Option<String>,
    /// `continue: false` was given (parsed, logged; not honoured, as upstream).
    pub stop: bool,
    /// `stopReason`.
    pub stop_reason: Option<String>,
    /// `hookSpecificOutput.updatedInput` (parsed, not honoured: arguments are immutable).
    pub updated_input: Option<Value>,
    /// Trimmed stderr.
    pub stderr: String,
    /// How stdout was read.
    pub stdout_form: StdoutForm,
}

impl HookOutput {
    /// The record's `decision`: the raw decision, else `stop` for `continue: false`, else
    /// `pass`.
    pub fn record_decision(&self) -> RecordDecision {
        match (self.decision, self.stop) {
            (Some(RawDecision::Block), _) => RecordDecision::Block,
            (Some(RawDecision::Deny), _) => RecordDecision::Deny,
            (Some(RawDecision::Ask), _) => RecordDecision::Ask,
            (Some(RawDecision::Allow), _) => RecordDecision::Allow,
            (Some(RawDecision::Approve), _) => RecordDecision::Approve,
            (None, true) => RecordDecision::Stop,
            (None, false) => RecordDecision::Pass,
        }
    }
}

/// Decodes one hook run: `exit` (None = no exit code), raw `stdout` / `stderr`, the `event` that
/// fired and the `dialect`.
///
/// - exit 2 ⇒ `block`, reason = trimmed stderr when not empty (stdout is not read);
/// - exit 0 and stdout starting with `{` ⇒ one JSON object: `continue`, `stopReason`,
///   `systemMessage`, `decision` (only `approve` | `block`), `reason`, then
///   `hookSpecificOutput` (ignored whole when its `hookEventName` names another event):
///   `permissionDecision` (`allow` | `deny` | `ask`, overrides `decision`),
///   `permissionDecisionReason` (overrides `reason`), `additionalContext`, `updatedInput`;
///   anything that is not exactly one object is ignored ([`StdoutForm::NotOneObject`]);
/// - exit 0, `SessionStart` / `UserPromptSubmit` (both dialects, as Claude Code and Codex do):
///   other non-empty stdout is the additional context;
/// - any other exit code ⇒ no decision (a non-blocking error).
///
/// Output the runner cut off is [`too_long`] instead.
pub fn parse_output(
    exit: Option<i32>,
    stdout: &str,
    stderr: &str,
    event: HookEvent,
    // Both dialects decode alike since plain context text counts for Claude Code too; the
    // parameter stays for the dialect-specific rules the protocol may grow.
    _dialect: Dialect,
) -> HookOutput {
    let stdout = stdout.trim();
    let stderr = stderr.trim();
    let mut out = HookOutput {
        exit_code: exit,
        decision: None,
        reason: None,
        additional_context: None,
        system_message: None,
        stop: false,
        stop_reason: None,
        updated_input: None,
        stderr: stderr.to_owned(),
        stdout_form: if stdout.is_empty() {
            StdoutForm::Empty
        } else {
            StdoutForm::Text
        },
    };
    match exit {
        Some(2) => {
            out.decision = Some(RawDecision::Block);
            out.reason = (!stderr.is_empty()).then(|| stderr.to_owned());
        }
        Some(0) if stdout.starts_with('{') => match serde_json::from_str::<Value>(stdout) {
            Ok(Value::Object(o)) => {
                out.stdout_form = StdoutForm::Json;
                read_json(&mut out, &o, event);
            }
            Ok(_) => out.stdout_form = StdoutForm::NotOneObject("not an object".to_owned()),
            Err(e) => out.stdout_form = StdoutForm::NotOneObject(e.to_string()),
        },
        Some(0)
            if !stdout.is_empty()
                && matches!(event, HookEvent::SessionStart | HookEvent::UserPromptSubmit) =>
        {
            out.additional_context = Some(stdout.to_owned());
        }
        _ => {}
    }
    out
}

/// The output of a hook whose stdout exceeded `max_bytes` (its exit code `exit`): nothing is
/// decoded; for `PreToolUse` it is a deny (a guard whose answer cannot be read fails closed)
/// whose reason says so, for other events no decision.
pub fn too_long(exit: Option<i32>, stderr: &str, event: HookEvent, max_bytes: usize) -> HookOutput {
    let mut out = parse_output(exit, "", stderr, event, Dialect::ClaudeCode);
    out.stdout_form = StdoutForm::TooLong(max_bytes);
    if event == HookEvent::PreToolUse && exit != Some(2) {
        out.decision = Some(RawDecision::Deny);
        out.reason = Some(format!(
            "the PreToolUse hook's output exceeded {max_bytes} bytes and was not read; the call is denied"
        ));
    }
    out
}

fn read_json(out: &mut HookOutput, o: &serde_json::Map<String, Value>, event: HookEvent) {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    if o.get("continue") == Some(&Value::Bool(false)) {
        out.stop = true;
    }
    out.stop_reason = text(o.get("stopReason"));
    out.system_message = text(o.get("systemMessage"));
    out.decision = match o.get("decision").and_then(Value::as_str) {
        Some("approve") => Some(RawDecision::Approve),
        Some("block") => Some(RawDecision::Block),
        _ => None,
    };
    out.reason = text(o.get("reason"));
    let Some(Value::Object(specific)) = o.get("hookSpecificOutput") else {
        return;
    };
    if let Some(name) = specific.get("hookEventName")
        && name.as_str() != Some(event.as_str())
    {
        return;
    }
    match specific.get("permissionDecision").and_then(Value::as_str) {
        Some("allow") => out.decision = Some(RawDecision::Allow),
        Some("deny") => out.decision = Some(RawDecision::Deny),
        Some("ask") => out.decision = Some(RawDecision::Ask),
        _ => {}
    }
    if let Some(r) = text(specific.get("permissionDecisionReason")) {
        out.reason = Some(r);
    }
    out.additional_context = text(specific.get("additionalContext"));
    if let Some(v @ Value::Object(_)) = specific.get("updatedInput") {
        out.updated_input = Some(v.clone());
    }
}

/// The merged decision of one point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No hook decided.
    None,
    /// The strongest was allow/approve.
    Allow,
    /// The strongest was ask.
    Ask,
    /// The strongest was deny/block.
    Deny,
}

/// Every output of one point merged.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    /// deny > ask > allow > none.
    pub decision: Decision,
    /// The reasons of the winning rank joined with a blank line (only for ask and deny;
    /// `None` when none of them gave one).
    pub reason: Option<String>,
    /// Every `additionalContext`, in order.
    pub contexts: Vec<String>,
    /// Every `systemMessage`, in order.
    pub system_messages: Vec<String>,
    /// The first `continue: false`'s `stopReason` (`Some("")` when it gave none).
    pub stop: Option<String>,
}

/// Merges `outputs` (in run order).
pub fn merge(outputs: &[HookOutput]) -> Merged {
    let top = outputs
        .iter()
        .filter_map(|o| o.decision.map(RawDecision::rank))
        .max()
        .unwrap_or(0);
    let reasons: Vec<&str> = outputs
        .iter()
        .filter(|o| top >= 2 && o.decision.map(RawDecision::rank) == Some(top))
        .filter_map(|o| o.reason.as_deref())
        .filter(|r| !r.is_empty())
        .collect();
    Merged {
        decision: match top {
            3 => Decision::Deny,
            2 => Decision::Ask,
            1 => Decision::Allow,
            _ => Decision::None,
        },
        reason: (!reasons.is_empty()).then(|| reasons.join("\n\n")),
        contexts: outputs
            .iter()
            .filter_map(|o| o.additional_context.clone())
            .filter(|c| !c.is_empty())
            .collect(),
        system_messages: outputs
            .iter()
            .filter_map(|o| o.system_message.clone())
            .collect(),
        stop: outputs
            .iter()
            .find(|o| o.stop)
            .map(|o| o.stop_reason.clone().unwrap_or_default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(exit: Option<i32>, out: &str, err: &str, ev: HookEvent) -> HookOutput {
        parse_output(exit, out, err, ev, Dialect::ClaudeCode)
    }

    #[test]
    fn exit_two_blocks_with_stderr() {
        let o = cc(
            Some(2),
            "{\"decision\":\"approve\"}",
            "  no rm\n",
            HookEvent::PreToolUse,
        );
        assert_eq!(o.decision, Some(RawDecision::Block));
        assert_eq!(o.reason.as_deref(), Some("no rm"));
        assert_eq!(o.record_decision(), RecordDecision::Block);
        // Silent exit 2 still blocks, without a reason (the bridge names the hook).
        let o = cc(Some(2), "", "", HookEvent::PreToolUse);
        assert_eq!((o.decision, o.reason), (Some(RawDecision::Block), None));
    }

    #[test]
    fn other_exit_codes_decide_nothing() {
        for exit in [Some(1), Some(127), None] {
            let o = cc(
                exit,
                "{\"decision\":\"block\"}",
                "oops",
                HookEvent::PreToolUse,
            );
            assert_eq!(o.decision, None);
            assert_eq!(o.record_decision(), RecordDecision::Pass);
            assert_eq!(o.stderr, "oops");
        }
    }

    #[test]
    fn json_fields() {
        let o = cc(
            Some(0),
            r#"{"continue":false,"stopReason":"s","systemMessage":"m","decision":"block","reason":"r",
               "hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask",
               "permissionDecisionReason":"why","additionalContext":"ctx","updatedInput":{"a":1}}}"#,
            "",
            HookEvent::PreToolUse,
        );
        assert_eq!(o.decision, Some(RawDecision::Ask));
        assert_eq!(o.reason.as_deref(), Some("why"));
        assert_eq!(o.additional_context.as_deref(), Some("ctx"));
        assert_eq!(o.system_message.as_deref(), Some("m"));
        assert!(o.stop);
        assert_eq!(o.stop_reason.as_deref(), Some("s"));
        assert_eq!(o.updated_input, Some(serde_json::json!({"a":1})));
        assert_eq!(o.stdout_form, StdoutForm::Json);
        // A block for another event is ignored whole; `decision` keeps only approve|block.
        let o = cc(
            Some(0),
            r#"{"decision":"deny","hookSpecificOutput":{"hookEventName":"PostToolUse","permissionDecision":"deny"}}"#,
            "",
            HookEvent::PreToolUse,
        );
        assert_eq!(o.decision, None);
        assert_eq!(o.record_decision(), RecordDecision::Pass);
        let o = cc(Some(0), r#"{"continue":false}"#, "", HookEvent::Stop);
        assert_eq!(o.record_decision(), RecordDecision::Stop);
    }

    #[test]
    fn not_exactly_one_object_is_ignored() {
        let o = cc(
            Some(0),
            "{\"decision\":\"block\"}\n{\"decision\":\"block\"}",
            "",
            HookEvent::PreToolUse,
        );
        assert_eq!(o.decision, None);
        assert!(
            matches!(o.stdout_form, StdoutForm::NotOneObject(_)),
            "{o:?}"
        );
        let o = cc(Some(0), "all good", "", HookEvent::PreToolUse);
        assert_eq!((o.decision, o.additional_context), (None, None));
        assert_eq!(o.stdout_form, StdoutForm::Text);
        // Claude Code: plain stdout of the two context events is context.
        let o = cc(
            Some(0),
            "ticket ABC-1
",
            "",
            HookEvent::UserPromptSubmit,
        );
        assert_eq!(o.additional_context.as_deref(), Some("ticket ABC-1"));
        let o = cc(Some(0), "on main", "", HookEvent::SessionStart);
        assert_eq!(o.additional_context.as_deref(), Some("on main"));
        // Codex: the same.
        let o = parse_output(
            Some(0),
            " teal \n",
            "",
            HookEvent::UserPromptSubmit,
            Dialect::Codex,
        );
        assert_eq!(o.additional_context.as_deref(), Some("teal"));
    }

    fn with(decision: Option<RawDecision>, reason: Option<&str>, ctx: Option<&str>) -> HookOutput {
        HookOutput {
            decision,
            reason: reason.map(str::to_owned),
            additional_context: ctx.map(str::to_owned),
            ..cc(Some(0), "", "", HookEvent::PreToolUse)
        }
    }

    #[test]
    fn merge_deny_over_ask_over_allow() {
        let m = merge(&[
            with(Some(RawDecision::Allow), Some("fine"), Some("c1")),
            with(Some(RawDecision::Ask), Some("check"), None),
            with(Some(RawDecision::Deny), Some("no"), Some("c2")),
            with(Some(RawDecision::Block), Some("never"), None),
        ]);
        assert_eq!(m.decision, Decision::Deny);
        assert_eq!(m.reason.as_deref(), Some("no\n\nnever"));
        assert_eq!(m.contexts, vec!["c1".to_owned(), "c2".to_owned()]);
        let m = merge(&[
            with(Some(RawDecision::Allow), Some("fine"), None),
            with(Some(RawDecision::Ask), Some("check"), None),
        ]);
        assert_eq!(
            (m.decision, m.reason.as_deref()),
            (Decision::Ask, Some("check"))
        );
        // Allow keeps no reason.
        let m = merge(&[with(Some(RawDecision::Approve), Some("fine"), None)]);
        assert_eq!((m.decision, m.reason), (Decision::Allow, None));
        assert_eq!(merge(&[]).decision, Decision::None);
    }
}
