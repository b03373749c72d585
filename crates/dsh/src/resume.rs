//! What a resumed session starts with: the provider route and model it ran on (unless the
//! command line says otherwise), and the last turns of its conversation, shown so the person
//! knows where they left off.
//!
//! Precedence for a resumed session (README, "Sessions"): command-line flags (`--provider`,
//! `-m`, `-c provider=…`, `-c model=…`) > the session's stored route and model (its latest
//! `request/context` event) > the settings files > the built-in default.

use std::fmt::Write as _;
use std::sync::Arc;

use dsh_llm::MessageSource;
use dsh_session::{EventData, SessionEvent};

use crate::settings::Config;

/// Where the route of a resumed session came from, for the shell's banner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteSource {
    /// `--provider`, `-m` or `-c` on this command line.
    Flags,
    /// The session's own latest `request/context`.
    Session,
    /// The settings files or built-in defaults (the session never sent a request).
    Settings,
}

impl RouteSource {
    /// A short phrase: `from the command line`, `as the session last used`, `from the settings`.
    pub fn phrase(self) -> &'static str {
        match self {
            Self::Flags => "from the command line",
            Self::Session => "as the session last used",
            Self::Settings => "from the settings",
        }
    }
}

/// Whether the key `dsh-agent <key>` was set on this command line (`-c` or a flag).
fn from_flags(config: &Config, key: &str) -> bool {
    config
        .resolved
        .origins
        .get(&format!("dsh-agent {key}"))
        .is_some_and(|o| o == "command line" || o == "-c flags")
}

/// The `(provider, model)` a resumed session runs on: `stored` is the session's latest
/// `request/context` `(provider, model)`, `config` the resolved settings (whose `provider` and
/// `model` already hold flags > settings > default). A flag for the provider alone keeps the
/// stored model only when it names the stored route.
pub fn choose_route(
    config: &Config,
    stored: Option<(&str, &str)>,
) -> (String, String, RouteSource) {
    let provider_flag = from_flags(config, "provider");
    let model_flag = from_flags(config, "model");
    let Some((sp, sm)) = stored else {
        let source = if provider_flag || model_flag {
            RouteSource::Flags
        } else {
            RouteSource::Settings
        };
        return (config.provider.clone(), config.model.clone(), source);
    };
    let provider = if provider_flag {
        config.provider.clone()
    } else {
        sp.to_owned()
    };
    let model = if model_flag {
        config.model.clone()
    } else if provider == sp {
        sm.to_owned()
    } else {
        config.model.clone()
    };
    let source = if provider_flag || model_flag {
        RouteSource::Flags
    } else {
        RouteSource::Session
    };
    (provider, model, source)
}

/// The `(provider, model)` of a `request/context` event (`Session::request_context_event`).
pub fn stored_route(event: Option<&SessionEvent>) -> Option<(String, String)> {
    match event.map(|e| &e.data) {
        Some(EventData::RequestContext(c)) => Some((c.provider.clone(), c.model.clone())),
        _ => None,
    }
}

/// How many turns a resume shows.
pub const SHOWN_TURNS: usize = 3;
/// Longest shown text of one message, in characters (longer is cut with `…`).
const SHOWN_CHARS: usize = 400;

fn clip(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut s: String = text.chars().take(max).collect();
    s.push('…');
    s
}

/// The last `n` turns of `events` as the shell shows them on resume: a `── earlier in this
/// session (last n of m turns)` line, then per turn the person's prompt (`> `-prefixed lines)
/// and the turn's final answer (the last assistant text), each cut to 400 characters. Empty when
/// the session has no turn.
pub fn last_turns(events: &[Arc<SessionEvent>], n: usize) -> String {
    // (prompt, answer) per turn, in order.
    let mut turns: Vec<(String, String)> = Vec::new();
    let mut open = false;
    for e in events {
        match &e.data {
            EventData::TurnStart(_) => {
                turns.push((String::new(), String::new()));
                open = true;
            }
            EventData::UserMessage(m) if open && matches!(m.source, MessageSource::User) => {
                if let Some(t) = turns.last_mut() {
                    if !t.0.is_empty() {
                        t.0.push('\n');
                    }
                    t.0.push_str(&m.text());
                }
            }
            EventData::AssistantMessage(m) if open => {
                let text = m.message.text();
                if let Some(t) = turns.last_mut()
                    && !text.trim().is_empty()
                {
                    t.1 = text;
                }
            }
            EventData::TurnEnd(_) => open = false,
            _ => {}
        }
    }
    if turns.is_empty() || n == 0 {
        return String::new();
    }
    let total = turns.len();
    let mut out = String::new();
    let shown = n.min(total);
    let _ = writeln!(
        out,
        "── earlier in this session (last {shown} of {total} turn{})",
        if total == 1 { "" } else { "s" }
    );
    for (prompt, answer) in &turns[total - shown..] {
        for line in clip(prompt, SHOWN_CHARS).lines() {
            let _ = writeln!(out, "> {line}");
        }
        if !answer.trim().is_empty() {
            let _ = writeln!(out, "{}", clip(answer, SHOWN_CHARS));
        }
    }
    out.push_str("──");
    out
}
