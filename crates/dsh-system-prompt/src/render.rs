//! Strict `{{name}}` interpolation and rendering of an assembly into the system prompt text and
//! the runtime-context sections.
//!
//! See docs/upstream/system-prompt.md (Rendering). Rules: a reference is a
//! complete `{{name}}` group with `name` matching `[a-z][a-z0-9_]*`; an unknown name, a name
//! without a value, a malformed group, or a `{{` followed later by `}}` without forming a valid
//! group is an error; a lone `{{` with no `}}` after it is literal text; substituted values are
//! not scanned again.

use std::collections::BTreeMap;

use dsh_llm::ContextSection;

use crate::error::{PromptError, PromptItem};
use crate::types::{AssembledSection, PromptAssembly};

/// The heading of a non-empty runtime-context snapshot message (upstream text, verbatim).
pub const SNAPSHOT_HEADING: &str =
    "Current runtime context. This snapshot supersedes earlier runtime-context snapshots.";

/// True when `name` matches `[a-z][a-z0-9_]*`.
pub fn is_valid_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        Some(c) if c.is_ascii_lowercase() => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Renders the system prompt: interpolates every section, drops sections that render empty,
/// and joins the rest with a blank line (`\n\n`). All sections empty ⇒ `""`.
///
/// # Errors
/// [`PromptError::MalformedReference`], [`PromptError::UnknownVariable`] or
/// [`PromptError::VariableUnset`] for the first bad reference (in section order).
pub fn render_prompt(assembly: &PromptAssembly) -> Result<String, PromptError> {
    let mut parts = Vec::with_capacity(assembly.sections.len());
    for section in &assembly.sections {
        let text = interpolate(section, &assembly.variables, PromptItem::Section)?;
        if !text.is_empty() {
            parts.push(text);
        }
    }
    Ok(parts.join("\n\n"))
}

/// Renders the runtime contexts: one [`ContextSection`] per context (in assembly order) whose
/// interpolated text is non-empty.
///
/// # Errors
/// As [`render_prompt`], for context texts.
pub fn render_contexts(assembly: &PromptAssembly) -> Result<Vec<ContextSection>, PromptError> {
    let mut out = Vec::with_capacity(assembly.contexts.len());
    for context in &assembly.contexts {
        let text = interpolate(context, &assembly.variables, PromptItem::Context)?;
        if !text.is_empty() {
            out.push(ContextSection {
                name: context.name.clone(),
                text,
            });
        }
    }
    Ok(out)
}

/// The model-facing snapshot text of rendered sections: `""` when every text is empty,
/// otherwise [`SNAPSHOT_HEADING`] + `"\n\n"` + the texts joined by `"\n\n"`.
pub fn join_context_sections(sections: &[ContextSection]) -> String {
    let body = sections
        .iter()
        .map(|s| s.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n");
    if body.is_empty() {
        return String::new();
    }
    format!("{SNAPSHOT_HEADING}\n\n{body}")
}

/// Interpolates one section or context text.
///
/// # Errors
/// See [`render_prompt`].
pub fn interpolate(
    input: &AssembledSection,
    variables: &BTreeMap<String, Option<String>>,
    item: PromptItem,
) -> Result<String, PromptError> {
    let text = input.text.as_str();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    while let Some(rel) = text[last..].find("{{") {
        let open = last + rel;
        let after = &text[open + 2..];
        // A complete group is `{{` + chars other than `{`/`}` + `}}`.
        let group_end = after
            .find(['{', '}'])
            .filter(|&i| after[i..].starts_with("}}"));
        let Some(inner_len) = group_end else {
            if after.contains("}}") {
                return Err(PromptError::MalformedReference {
                    item,
                    owner: input.name.clone(),
                    at: text[open..].chars().take(16).collect(),
                });
            }
            out.push_str(&text[last..open + 2]);
            last = open + 2;
            continue;
        };
        let name = &after[..inner_len];
        if !is_valid_variable_name(name) {
            return Err(PromptError::MalformedReference {
                item,
                owner: input.name.clone(),
                at: text[open..].chars().take(16).collect(),
            });
        }
        let value = match variables.get(name) {
            None => {
                return Err(PromptError::UnknownVariable {
                    name: name.to_owned(),
                    item,
                    owner: input.name.clone(),
                    known: variables.keys().cloned().collect(),
                });
            }
            Some(None) => {
                return Err(PromptError::VariableUnset {
                    name: name.to_owned(),
                    item,
                    owner: input.name.clone(),
                });
            }
            Some(Some(v)) => v,
        };
        out.push_str(&text[last..open]);
        out.push_str(value);
        last = open + 2 + inner_len + 2;
    }
    out.push_str(&text[last..]);
    Ok(out)
}
