//! The request history: the messages derived from the session log, with a note in place of each
//! tool call that has no name.
//!
//! Providers refuse a function call with an empty name, so adapters leave such a call and its
//! result out of every request. Without a trace the model never learns that its call failed and
//! each later request is the same as the one before. [`request_history`] therefore adds short
//! text notes where the dropped call was, keeping the message sequence valid for
//! OpenAI-compatible routes (see docs/upstream/agent-loop.md, "Tool calls without a name").

use std::collections::HashSet;
use std::sync::Arc;

use dsh_llm::{ContentBlock, Message, MessageSource, Role};

/// Text put into an assistant message that held only nameless tool calls (and no text), so the
/// message is still sent and the next note follows an assistant turn.
pub const NAMELESS_CALL_PLACEHOLDER: &str = "[a tool call without a name]";

/// Text appended after the results of a step that had a nameless tool call.
pub const NAMELESS_CALL_NOTE: &str =
    "[a tool call without a name was dropped; call tools by their exact names]";

/// True when `name` is not a usable tool name (empty or blank), as adapters judge it.
fn is_nameless(name: &str) -> bool {
    name.trim().is_empty()
}

/// True when `m` is a user message that carries at least one tool result (a step's results are
/// logged as such messages).
fn is_result_message(m: &Message) -> bool {
    m.role == Role::User
        && m.content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolResult { .. }))
}

/// The history sent to the model: `messages` (as derived from the session log) unchanged when no
/// assistant message holds a tool call without a name (empty or blank); otherwise, for each such
/// assistant message:
///
/// - when it has neither text nor a named call, a text block [`NAMELESS_CALL_PLACEHOLDER`] is
///   added to it (so it is not dropped and the roles keep alternating);
/// - [`NAMELESS_CALL_NOTE`] is appended as a text block to the last tool-result message that
///   directly follows it (after every result of that step, so tool results still follow their
///   call), or, when no result follows, inserted as a new user message right after it.
///
/// The nameless calls and their results stay in the messages; adapters leave them out. Pure:
/// the same log prefix gives the same history, so "request = f(log prefix)" holds with
/// `f = request_history ∘ derive_messages`.
pub fn request_history(messages: Vec<Arc<Message>>) -> Vec<Arc<Message>> {
    let has_nameless = |m: &Message| {
        m.role == Role::Assistant && m.tool_calls().any(|(_, name, _)| is_nameless(name))
    };
    if !messages.iter().any(|m| has_nameless(m)) {
        return messages;
    }
    let nameless_ids: HashSet<String> = messages
        .iter()
        .flat_map(|m| m.tool_calls())
        .filter(|(_, name, _)| is_nameless(name))
        .map(|(id, _, _)| id.as_str().to_owned())
        .collect();
    let mut out = Vec::with_capacity(messages.len() + 1);
    let mut i = 0;
    while i < messages.len() {
        let m = &messages[i];
        if !has_nameless(m) {
            out.push(m.clone());
            i += 1;
            continue;
        }
        let keeps_something = m.content.iter().any(|b| match b {
            ContentBlock::Text { text } => !text.is_empty(),
            ContentBlock::ToolCall { id, .. } => !nameless_ids.contains(id.as_str()),
            _ => false,
        });
        if keeps_something {
            out.push(m.clone());
        } else {
            let mut with_text = (**m).clone();
            with_text
                .content
                .insert(0, ContentBlock::text(NAMELESS_CALL_PLACEHOLDER));
            out.push(Arc::new(with_text));
        }
        i += 1;
        let mut last_result = None;
        while i < messages.len() && is_result_message(&messages[i]) {
            out.push(messages[i].clone());
            last_result = Some(out.len() - 1);
            i += 1;
        }
        match last_result {
            Some(at) => {
                let mut noted = (*out[at]).clone();
                noted.content.push(ContentBlock::text(NAMELESS_CALL_NOTE));
                out[at] = Arc::new(noted);
            }
            None => out.push(Arc::new(Message::user(
                vec![ContentBlock::text(NAMELESS_CALL_NOTE)],
                MessageSource::User,
            ))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn assistant(content: Vec<ContentBlock>) -> Arc<Message> {
        Arc::new(Message::assistant(content, "deepseek", "m", None))
    }

    fn result(id: &str, text: &str) -> Arc<Message> {
        Arc::new(Message::tool_result(
            id.into(),
            vec![ContentBlock::text(text)],
            true,
        ))
    }

    fn texts(m: &Message) -> Vec<String> {
        m.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_history_without_nameless_calls_is_unchanged() {
        let h = vec![
            Arc::new(Message::user_text("go")),
            assistant(vec![ContentBlock::tool_call("c1", "read", "{}")]),
            result("c1", "ok"),
        ];
        let out = request_history(h.clone());
        assert_eq!(out.len(), 3);
        for (a, b) in out.iter().zip(&h) {
            assert!(Arc::ptr_eq(a, b));
        }
    }

    #[test]
    fn a_lone_nameless_call_gets_a_placeholder_and_a_note_after_its_result() {
        let h = vec![
            Arc::new(Message::user_text("go")),
            assistant(vec![ContentBlock::tool_call("c1", "", "{}")]),
            result("c1", "no such tool"),
        ];
        let out = request_history(h);
        assert_eq!(out.len(), 3);
        assert_eq!(texts(&out[1]), [NAMELESS_CALL_PLACEHOLDER]);
        assert_eq!(out[1].tool_calls().count(), 1);
        assert_eq!(texts(&out[2]), [NAMELESS_CALL_NOTE]);
        assert_eq!(out[2].content.len(), 2);
        assert!(matches!(
            &out[2].content[0],
            ContentBlock::ToolResult { tool_call_id, .. } if tool_call_id.as_str() == "c1"
        ));
    }

    #[test]
    fn the_note_follows_every_result_of_the_step() {
        let h = vec![
            Arc::new(Message::user_text("go")),
            assistant(vec![
                ContentBlock::tool_call("c1", " ", "{}"),
                ContentBlock::tool_call("c2", "read", "{}"),
            ]),
            result("c1", "no name"),
            result("c2", "ok"),
            Arc::new(Message::user_text("next")),
        ];
        let out = request_history(h);
        assert_eq!(out.len(), 5);
        // a named call is left, so no placeholder
        assert!(texts(&out[1]).is_empty());
        assert!(texts(&out[2]).is_empty());
        assert_eq!(out[3].content.len(), 2);
        assert!(matches!(
            &out[3].content[1],
            ContentBlock::Text { text } if text == NAMELESS_CALL_NOTE
        ));
        assert_eq!(out[4].text(), "next");
    }

    #[test]
    fn a_nameless_call_without_a_result_gets_a_note_message() {
        let h = vec![
            Arc::new(Message::user_text("go")),
            assistant(vec![
                ContentBlock::text("let me see"),
                ContentBlock::tool_call("c1", "", "{}"),
            ]),
        ];
        let out = request_history(h);
        assert_eq!(out.len(), 3);
        assert_eq!(texts(&out[1]), ["let me see"]);
        assert_eq!(out[2].role, Role::User);
        assert_eq!(out[2].text(), NAMELESS_CALL_NOTE);
    }
}
