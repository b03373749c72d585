//! The catalog message and `/name` user invocation, as an `agent/pre-step` listener.
//!
//! See docs/upstream/skills.md ("Catalog message", "User invocation").

use std::sync::Arc;

use dsh_agent::{AgentPreStep, AgentRegistry, PreStepDecision};
use dsh_kernel::{Context, Registration};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::Session;
use dsh_skills::catalog::{
    CATALOG_SOURCE_KIND, CatalogEntry, INVOCATION_SOURCE_KIND, catalog_text, digest, entries,
    skill_content_text,
};
use dsh_skills::{SkillScope, SkillSnapshot, Skills};
use dsh_tools::ToolRegistry;
use serde_json::json;

use crate::scope::scope_of;

/// The digest of the newest catalog message still on `session`'s surface, if any.
pub fn newest_catalog_digest(session: &Session) -> Option<String> {
    session.messages_snapshot().iter().rev().find_map(|m| {
        let MessageSource::Other(v) = &m.source else {
            return None;
        };
        if v.get("kind").and_then(|k| k.as_str()) != Some(CATALOG_SOURCE_KIND) {
            return None;
        }
        let entries: Vec<CatalogEntry> =
            serde_json::from_value(v.get("entries").cloned().unwrap_or_default())
                .unwrap_or_default();
        Some(digest(&entries))
    })
}

/// The catalog message to add before a step, when one is due: the skill tool is visible
/// (`tool_visible`), the snapshot is complete, and its entries' digest differs from the newest
/// catalog on the surface (none yet: only when there is at least one model-invocable skill).
pub fn catalog_message(
    session: &Session,
    snapshot: &SkillSnapshot,
    tool_visible: bool,
) -> Option<Message> {
    if !tool_visible || !snapshot.complete {
        return None;
    }
    let entries = entries(&snapshot.skills);
    let update = match newest_catalog_digest(session) {
        None if entries.is_empty() => return None,
        None => false,
        Some(d) if d == digest(&entries) => return None,
        Some(_) => true,
    };
    let mut source = json!({"kind": CATALOG_SOURCE_KIND, "form": "catalog", "entries": entries});
    if update {
        source["update"] = json!(true);
    }
    Some(Message::user(
        vec![ContentBlock::text(catalog_text(&entries, update))],
        MessageSource::Other(source),
    ))
}

/// The skills a user message invokes: each whitespace-separated `/name` token naming a
/// user-invocable skill of `snapshot`, once each, in order.
pub fn invoked_names(message: &Message, snapshot: &SkillSnapshot) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    if !matches!(message.source, MessageSource::User) {
        return out;
    }
    for block in &message.content {
        let Some(text) = block.as_text() else {
            continue;
        };
        for token in text.split_whitespace() {
            let Some(name) = token.strip_prefix('/') else {
                continue;
            };
            let known = snapshot
                .skills
                .iter()
                .any(|s| s.name == name && s.invocation.user_invocable);
            if known && !out.iter().any(|n| n == name) {
                out.push(name.to_owned());
            }
        }
    }
    out
}

/// Installs the `agent/pre-step` listener through `ctx` (after the rest of the chain, so the
/// messages land after the runtime-context snapshot).
///
/// # Errors
/// The kernel's error when `ctx` is inactive.
pub fn install(
    ctx: &Context,
    skills: Arc<Skills>,
) -> Result<Registration, dsh_kernel::KernelError> {
    let root = ctx.clone();
    ctx.on_waterfall::<AgentPreStep, _, _>(move |p, next| {
        let skills = skills.clone();
        let root = root.clone();
        async move {
            let session = p.session.clone();
            let key = p.scope.clone();
            let decision = next.run(p).await;
            let PreStepDecision::Enter { mut messages } = decision else {
                return decision;
            };
            if messages.is_empty() {
                return PreStepDecision::Enter { messages };
            }
            let agent_ctx = root
                .get::<AgentRegistry>()
                .and_then(|r| r.get(session.id()))
                .map(|a| a.ctx().clone());
            let scope: SkillScope = scope_of(agent_ctx.as_ref(), &session);
            let snapshot = skills.snapshot(&scope);
            let tool_visible = root
                .get::<ToolRegistry>()
                .is_some_and(|t| t.effects(crate::tool::SKILL_TOOL, key.as_ref()).is_some());
            let mut extra: Vec<Arc<Message>> = Vec::new();
            if let Some(m) = catalog_message(&session, &snapshot, tool_visible) {
                extra.push(Arc::new(m));
            }
            for message in &messages {
                for name in invoked_names(message, &snapshot) {
                    match skills.load(&scope, &name) {
                        Ok(loaded) => extra.push(Arc::new(Message::user(
                            vec![ContentBlock::text(skill_content_text(&loaded))],
                            MessageSource::Other(json!({
                                "kind": INVOCATION_SOURCE_KIND,
                                "name": name,
                                "form": "instructions",
                            })),
                        ))),
                        Err(e) => tracing::warn!(
                            target: "dsh_skill_filesystem", skill = %name,
                            "cannot load the invoked skill: {e}"
                        ),
                    }
                }
            }
            messages.extend(extra);
            PreStepDecision::Enter { messages }
        }
    })
}
