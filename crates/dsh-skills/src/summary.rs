//! What a provider reports for one skill.

use std::path::PathBuf;

use serde::Serialize;

/// Who may invoke a skill (frontmatter `disable-model-invocation`, `user-invocable`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillInvocation {
    /// The model may load it with the `skill` tool and it is listed in the catalog (default
    /// true; `disable-model-invocation: true` clears it).
    pub model_invocable: bool,
    /// A user may invoke it with `/name` in a prompt (default true).
    pub user_invocable: bool,
}

impl Default for SkillInvocation {
    fn default() -> Self {
        Self {
            model_invocable: true,
            user_invocable: true,
        }
    }
}

/// Where a skill's relative resource paths resolve (upstream `resourceBase`); JSON
/// `{"kind":"directory","path":…}` | `{"kind":"url","url":…}` | `{"kind":"opaque","description":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ResourceBase {
    /// A local directory (every filesystem skill: the folder holding its `SKILL.md`).
    Directory {
        /// Absolute path.
        path: PathBuf,
    },
    /// A remote location.
    Url {
        /// The URL.
        url: String,
    },
    /// Something only a description can name.
    Opaque {
        /// The description.
        description: String,
    },
}

/// One skill as listed: everything but its body (which is re-read on every load).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillSummary {
    /// The skill's name (`^[a-z0-9]+(?:-[a-z0-9]+)*$`), unique in a snapshot.
    pub name: String,
    /// What it is for (the catalog line).
    pub description: String,
    /// Frontmatter `whenToUse`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when_to_use: Option<String>,
    /// Who may invoke it.
    pub invocation: SkillInvocation,
    /// The root it came from (the filesystem provider: `project`, `project-agents`,
    /// `project-claude`, `custom`, `dsh-home`, `agents-home`, `claude-home`, `bundled`).
    pub source: String,
    /// The provider's id (`filesystem`).
    pub provider: String,
    /// Where its resources resolve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_base: Option<ResourceBase>,
    /// The provider's handle to the body (the filesystem provider: the `SKILL.md` path). Not
    /// serialized.
    #[serde(skip)]
    pub location: PathBuf,
}
