//! The texts the model sees: the skill catalog message and a loaded skill's
//! `<skill_content>` block. Exact wording: docs/upstream/skills.md ("Catalog message",
//! "Skill content").

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{LoadedSkill, ResourceBase, SkillSummary};

/// Longest catalog description in characters (upstream `catalogDescriptionMaxLength`); a
/// longer one is cut to `MAX - 3` characters plus `...`.
pub const CATALOG_DESCRIPTION_MAX_CHARS: usize = 500;

/// The message source kind of a catalog message (`{"kind":"skill-catalog","form":"catalog",…}`).
pub const CATALOG_SOURCE_KIND: &str = "skill-catalog";

/// The message source kind of a user-invoked skill (`{"kind":"skill-invocation",…}`).
pub const INVOCATION_SOURCE_KIND: &str = "skill-invocation";

/// One catalog line's facts (also recorded in the message source's `entries`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CatalogEntry {
    /// The skill name.
    pub name: String,
    /// The description: whitespace collapsed, cut to [`CATALOG_DESCRIPTION_MAX_CHARS`]
    /// (not XML-escaped; the text escapes it).
    pub description: String,
}

/// Collapses runs of whitespace to one space and trims.
fn collapse(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Escapes `&`, `<` and `>`.
pub fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The catalog entries of the model-invocable skills in `skills` (in order).
pub fn entries(skills: &[SkillSummary]) -> Vec<CatalogEntry> {
    skills
        .iter()
        .filter(|s| s.invocation.model_invocable)
        .map(|s| {
            let d = collapse(&s.description);
            let description = if d.chars().count() > CATALOG_DESCRIPTION_MAX_CHARS {
                let cut: String = d.chars().take(CATALOG_DESCRIPTION_MAX_CHARS - 3).collect();
                format!("{cut}...")
            } else {
                d
            };
            CatalogEntry {
                name: s.name.clone(),
                description,
            }
        })
        .collect()
}

/// The sha256 (lowercase hex) of the entries' compact JSON: what decides whether a catalog
/// must be sent again.
pub fn digest(entries: &[CatalogEntry]) -> String {
    let json = serde_json::to_vec(entries).unwrap_or_default();
    let mut hex = String::with_capacity(64);
    for b in Sha256::digest(&json) {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

const INTRO: &str = "A skill is a reusable set of task-specific instructions. The following skills are available in this session:";
const UPDATE_INTRO: &str = "The skill catalog changed. This list replaces earlier lists of available skills; the following skills are available in this session:";
const EMPTY_UPDATE: &str = "The skill catalog changed: no skills are available in this session any more. Do not call the `skill` tool for skills listed earlier.";
const GUIDANCE: &str = "If the user names a skill, or the task clearly matches a skill's description, call the `skill` tool with the exact skill name before taking task actions. Load all applicable skills, then follow their full instructions. This catalog contains summaries only; do not infer or follow a skill's instructions until it has been loaded.\nA user may also invoke a skill directly; its <skill_content> block then appears in this conversation. Follow it, and do not call the `skill` tool again for that skill.";

/// The catalog message text. `update`: a replacement of an earlier catalog (a changed list;
/// an empty `entries` then says that no skills are left). The first catalog (`update` false)
/// is upstream's text byte for byte.
pub fn catalog_text(entries: &[CatalogEntry], update: bool) -> String {
    if update && entries.is_empty() {
        return format!("<system-reminder>\n{EMPTY_UPDATE}\n</system-reminder>");
    }
    let mut lines = String::new();
    for e in entries {
        lines.push_str(&format!("- `{}`: {}\n", e.name, xml_escape(&e.description)));
    }
    let intro = if update { UPDATE_INTRO } else { INTRO };
    format!(
        "<system-reminder>\n{intro}\n\n<available_skills>\n{lines}</available_skills>\n\n{GUIDANCE}\n</system-reminder>"
    )
}

/// A loaded skill as the model sees it (the `skill` tool's result and a user invocation):
///
/// ```text
/// <skill_content name="NAME">
/// <skill_resources>
/// Base directory for this skill: PATH
/// Resolve relative paths mentioned by this skill against the base directory before using them. Load referenced resources only as needed.
/// </skill_resources>
///
/// <skill_instructions>
/// BODY
/// </skill_instructions>
/// </skill_content>
/// ```
///
/// (`<skill_resources>` names a URL or a description for the other resource bases, and is
/// left out without one.)
pub fn skill_content_text(skill: &LoadedSkill) -> String {
    let resources = match &skill.summary.resource_base {
        Some(ResourceBase::Directory { path }) => Some(format!(
            "Base directory for this skill: {}\nResolve relative paths mentioned by this skill against the base directory before using them. Load referenced resources only as needed.",
            path.display()
        )),
        Some(ResourceBase::Url { url }) => Some(format!(
            "Base URL for this skill: {url}\nResolve relative paths mentioned by this skill against the base URL before using them. Load referenced resources only as needed."
        )),
        Some(ResourceBase::Opaque { description }) => {
            Some(format!("Resources of this skill: {description}"))
        }
        None => None,
    };
    let resources = resources
        .map(|r| format!("<skill_resources>\n{r}\n</skill_resources>\n\n"))
        .unwrap_or_default();
    format!(
        "<skill_content name=\"{}\">\n{resources}<skill_instructions>\n{}\n</skill_instructions>\n</skill_content>",
        skill.summary.name, skill.content
    )
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::SkillInvocation;

    fn summary(name: &str, description: &str, model: bool) -> SkillSummary {
        SkillSummary {
            name: name.into(),
            description: description.into(),
            when_to_use: None,
            invocation: SkillInvocation {
                model_invocable: model,
                user_invocable: true,
            },
            source: "project".into(),
            provider: "filesystem".into(),
            resource_base: Some(ResourceBase::Directory {
                path: PathBuf::from("/p/.dsh/skills/x"),
            }),
            location: PathBuf::new(),
        }
    }

    #[test]
    fn entries_collapse_cut_and_skip_user_only_skills() {
        let long = "w ".repeat(400);
        let e = entries(&[
            summary("a", "  one\n two  ", true),
            summary("b", "hidden", false),
            summary("c", &long, true),
        ]);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].description, "one two");
        assert_eq!(e[1].description.chars().count(), 500);
        assert!(e[1].description.ends_with("w..."));
        assert_eq!(
            catalog_text(&e[..1], false),
            format!(
                "<system-reminder>\n{INTRO}\n\n<available_skills>\n- `a`: one two\n</available_skills>\n\n{GUIDANCE}\n</system-reminder>"
            )
        );
        assert_eq!(digest(&e[..1]), digest(&e[..1]));
        assert_ne!(digest(&e[..1]), digest(&e));
        assert_eq!(xml_escape("a<b>&c"), "a&lt;b&gt;&amp;c");
        assert_eq!(
            catalog_text(&[], true),
            format!("<system-reminder>\n{EMPTY_UPDATE}\n</system-reminder>")
        );
    }
}
