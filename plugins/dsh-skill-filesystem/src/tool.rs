//! The `skill` tool. See docs/upstream/skills.md ("The skill tool").

use std::sync::Arc;

use dsh_llm::ContentBlock;
use dsh_skills::catalog::skill_content_text;
use dsh_skills::{LoadedSkill, ResourceBase, Skills, is_valid_skill_name};
use dsh_tools::{Tool, ToolEffects, ToolFailure, ToolRunContext};
use serde::{Deserialize, Serialize};

use crate::scope::scope_of_caller;

/// Arguments of `skill`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkillArgs {
    /// The exact name of the skill to load, as listed in the available skills.
    pub name: String,
}

/// The resource base in the tool's value (`{"kind":"directory","path":…}` …).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ResourceBaseValue {
    /// A local directory.
    Directory {
        /// Absolute path.
        path: String,
    },
    /// A URL.
    Url {
        /// The URL.
        url: String,
    },
    /// A description.
    Opaque {
        /// The description.
        description: String,
    },
}

/// The value of a successful call: `{name, provider, resourceBase?, content}` (upstream's).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkillValue {
    /// The skill name.
    pub name: String,
    /// The provider that listed it.
    pub provider: String,
    /// Where its resources resolve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_base: Option<ResourceBaseValue>,
    /// The body read for this call.
    pub content: String,
    /// The rendered `<skill_content>` text (what the model sees).
    #[serde(default, skip_serializing)]
    pub rendered: String,
}

/// The tool's name.
pub const SKILL_TOOL: &str = "skill";

/// The `skill` tool over the [`Skills`] registry.
pub struct SkillTool {
    /// The registry.
    pub skills: Arc<Skills>,
}

impl Tool for SkillTool {
    const NAME: &'static str = "skill";
    type Args = SkillArgs;
    type Output = SkillValue;

    fn description(&self) -> String {
        "Load a skill: its full instructions and the base directory of its resources. Call it with the exact name of a skill from the available skills list before acting on a task the skill covers.".into()
    }

    fn effects(&self) -> ToolEffects {
        ToolEffects::READ_ONLY.parallel_safe()
    }

    async fn call(&self, args: SkillArgs, cx: ToolRunContext) -> Result<SkillValue, ToolFailure> {
        let name = args.name.trim();
        if !is_valid_skill_name(name) {
            return Err(ToolFailure::message(format!(
                "invalid skill name {name:?}: lowercase letters, digits and single hyphens only"
            )));
        }
        let scope = scope_of_caller(cx.exec.caller.as_ref());
        let summary = self.skills.get(&scope, name).ok_or_else(|| {
            ToolFailure::message(format!(
                "skill \"{name}\" is unknown or no longer available"
            ))
        })?;
        if !summary.invocation.model_invocable {
            return Err(ToolFailure::message(format!(
                "skill \"{name}\" is not available for model invocation"
            )));
        }
        let loaded: LoadedSkill = self
            .skills
            .load(&scope, name)
            .map_err(|e| ToolFailure::message(e.to_string()))?;
        let rendered = skill_content_text(&loaded);
        let resource_base = loaded.summary.resource_base.as_ref().map(|b| match b {
            ResourceBase::Directory { path } => ResourceBaseValue::Directory {
                path: path.display().to_string(),
            },
            ResourceBase::Url { url } => ResourceBaseValue::Url { url: url.clone() },
            ResourceBase::Opaque { description } => ResourceBaseValue::Opaque {
                description: description.clone(),
            },
        });
        Ok(SkillValue {
            name: loaded.summary.name,
            provider: loaded.summary.provider,
            resource_base,
            content: loaded.content,
            rendered,
        })
    }

    fn render(&self, _args: &SkillArgs, out: &SkillValue) -> Vec<ContentBlock> {
        vec![ContentBlock::text(out.rendered.clone())]
    }
}
