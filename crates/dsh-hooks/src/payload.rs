//! The JSON a hook reads on stdin, with Claude Code's (and Codex's) field names. See
//! docs/upstream/hooks.md ("Payloads").

use serde_json::{Map, Value, json};

use crate::config::{Dialect, HookEvent};

/// The fields every payload starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Common {
    /// The session id (`""` when unknown).
    pub session_id: String,
    /// Where the session log is stored (`None` when it is not: an ephemeral session, a backend
    /// without files). Claude Code then sends `""`, Codex `null`.
    pub transcript_path: Option<String>,
    /// The session's working directory.
    pub cwd: String,
    /// The model of the session's last request (`""` when none yet; Codex only).
    pub model: String,
}

/// What one event adds to [`Common`].
#[derive(Debug, Clone, PartialEq)]
pub enum Facts {
    /// `SessionStart`: `source` = `startup` | `resume` | `clear` | `compact`.
    SessionStart {
        /// Why the session started.
        source: String,
    },
    /// `UserPromptSubmit`: the prompt text.
    UserPromptSubmit {
        /// The turn number (Codex `turn_id`).
        turn: u64,
        /// The text blocks of the user's messages, joined with `""`.
        prompt: String,
    },
    /// `PreToolUse` / `PostToolUse`.
    Tool {
        /// `PreToolUse` or `PostToolUse`.
        event: HookEvent,
        /// The turn number (Codex `turn_id`).
        turn: u64,
        /// dsh's tool name (`bash`, `read`, `edit`, …).
        tool_name: String,
        /// The parsed arguments (Codex: only `{command}`).
        tool_input: Value,
        /// The provider's call id.
        tool_use_id: String,
        /// `PostToolUse`: the result's text blocks joined with `""`.
        tool_response: Option<String>,
    },
    /// `Stop`.
    Stop {
        /// The turn number (Codex `turn_id`).
        turn: u64,
        /// True when a Stop hook already sent this turn back at least once.
        stop_hook_active: bool,
        /// The text of the turn's last assistant message (Codex only).
        last_assistant_message: Option<String>,
    },
}

impl Facts {
    /// The event these facts belong to.
    pub fn event(&self) -> HookEvent {
        match self {
            Self::SessionStart { .. } => HookEvent::SessionStart,
            Self::UserPromptSubmit { .. } => HookEvent::UserPromptSubmit,
            Self::Tool { event, .. } => *event,
            Self::Stop { .. } => HookEvent::Stop,
        }
    }
}

/// The whole payload object for `dialect`, fields in this order: `session_id`,
/// `transcript_path`, `cwd`, `hook_event_name` (Codex: then `model`, `permission_mode:
/// "default"`), then the event's own fields (Codex: `turn_id` first, a string).
pub fn payload(dialect: Dialect, common: &Common, facts: &Facts) -> Value {
    let mut m = Map::new();
    m.insert("session_id".into(), json!(common.session_id));
    m.insert(
        "transcript_path".into(),
        match (&common.transcript_path, dialect) {
            (Some(p), _) => json!(p),
            (None, Dialect::ClaudeCode) => json!(""),
            (None, Dialect::Codex) => Value::Null,
        },
    );
    m.insert("cwd".into(), json!(common.cwd));
    m.insert("hook_event_name".into(), json!(facts.event().as_str()));
    let codex = dialect == Dialect::Codex;
    if codex {
        m.insert("model".into(), json!(common.model));
        m.insert("permission_mode".into(), json!("default"));
    }
    let turn_id = |m: &mut Map<String, Value>, turn: u64| {
        if codex {
            m.insert("turn_id".into(), json!(turn.to_string()));
        }
    };
    match facts {
        Facts::SessionStart { source } => {
            m.insert("source".into(), json!(source));
        }
        Facts::UserPromptSubmit { turn, prompt } => {
            turn_id(&mut m, *turn);
            m.insert("prompt".into(), json!(prompt));
        }
        Facts::Tool {
            turn,
            tool_name,
            tool_input,
            tool_use_id,
            tool_response,
            ..
        } => {
            turn_id(&mut m, *turn);
            m.insert("tool_name".into(), json!(tool_name));
            let input = if codex {
                json!({"command": tool_input.get("command").cloned().unwrap_or_else(|| json!(""))})
            } else {
                tool_input.clone()
            };
            m.insert("tool_input".into(), input);
            m.insert("tool_use_id".into(), json!(tool_use_id));
            if let Some(r) = tool_response {
                m.insert("tool_response".into(), json!(r));
            }
        }
        Facts::Stop {
            turn,
            stop_hook_active,
            last_assistant_message,
        } => {
            turn_id(&mut m, *turn);
            m.insert("stop_hook_active".into(), json!(stop_hook_active));
            if codex {
                m.insert(
                    "last_assistant_message".into(),
                    last_assistant_message
                        .as_ref()
                        .map_or(Value::Null, |t| json!(t)),
                );
            }
        }
    }
    Value::Object(m)
}

/// The bytes written to the hook's stdin: the payload as one line, with a trailing newline in
/// the Claude Code dialect and none in Codex (as upstream).
pub fn stdin_bytes(dialect: Dialect, payload: &Value) -> Vec<u8> {
    let mut s = payload.to_string();
    if dialect == Dialect::ClaudeCode {
        s.push('\n');
    }
    s.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common() -> Common {
        Common {
            session_id: "s-1".into(),
            transcript_path: None,
            cwd: "/w".into(),
            model: "m".into(),
        }
    }

    #[test]
    fn pre_tool_use_in_both_dialects() {
        let facts = Facts::Tool {
            event: HookEvent::PreToolUse,
            turn: 3,
            tool_name: "bash".into(),
            tool_input: json!({"command": "rm -rf x", "description": "d"}),
            tool_use_id: "call_1".into(),
            tool_response: None,
        };
        assert_eq!(
            payload(Dialect::ClaudeCode, &common(), &facts).to_string(),
            r#"{"session_id":"s-1","transcript_path":"","cwd":"/w","hook_event_name":"PreToolUse","tool_name":"bash","tool_input":{"command":"rm -rf x","description":"d"},"tool_use_id":"call_1"}"#
        );
        assert_eq!(
            payload(Dialect::Codex, &common(), &facts).to_string(),
            r#"{"session_id":"s-1","transcript_path":null,"cwd":"/w","hook_event_name":"PreToolUse","model":"m","permission_mode":"default","turn_id":"3","tool_name":"bash","tool_input":{"command":"rm -rf x"},"tool_use_id":"call_1"}"#
        );
        assert_eq!(
            stdin_bytes(Dialect::ClaudeCode, &json!({})),
            b"{}\n".to_vec()
        );
        assert_eq!(stdin_bytes(Dialect::Codex, &json!({})), b"{}".to_vec());
    }

    #[test]
    fn stop_and_prompt() {
        let stop = Facts::Stop {
            turn: 1,
            stop_hook_active: true,
            last_assistant_message: Some("done".into()),
        };
        assert_eq!(
            payload(Dialect::ClaudeCode, &common(), &stop),
            json!({"session_id":"s-1","transcript_path":"","cwd":"/w","hook_event_name":"Stop","stop_hook_active":true})
        );
        assert_eq!(
            payload(Dialect::Codex, &common(), &stop)["last_assistant_message"],
            json!("done")
        );
        let p = Facts::UserPromptSubmit {
            turn: 2,
            prompt: "hi".into(),
        };
        assert_eq!(
            payload(Dialect::Codex, &common(), &p)["turn_id"],
            json!("2")
        );
    }
}
