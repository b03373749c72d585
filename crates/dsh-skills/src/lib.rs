//! dsh-skills: the skills seam.
//!
//! A *skill* is a named set of task instructions (a `SKILL.md` folder: YAML frontmatter with
//! `name` and `description`, then a Markdown body) that the model loads on demand with the
//! `skill` tool, or that a user invokes with `/name` in a prompt. This crate holds what every
//! skill source and consumer shares:
//!
//! - [`SkillSummary`] and [`ResourceBase`]: what a provider reports for one skill;
//! - [`SkillProvider`]: a source of skills (the filesystem plugin is one), listing ranked
//!   entries for a [`SkillScope`] (the project root) and loading a skill's body on demand;
//! - [`Skills`]: the registry service (a kernel service): merges the providers' listings by rank
//!   (the lower rank wins a duplicate name), answers `snapshot` / `get` / `load`, and emits
//!   [`SkillsChange`] (`skills/change`) when a scope's snapshot differs from the last one seen;
//! - [`parse_skill_file`]: the `SKILL.md` format, with a maintained YAML library;
//! - [`catalog`]: the catalog message text (`<available_skills>`), its digest, and the
//!   `<skill_content>` text a loaded skill renders to.
//!
//! Upstream behaviour and the dsh additions: docs/upstream/skills.md.

mod error;
mod frontmatter;
mod registry;
mod summary;

pub mod catalog;

pub use error::SkillError;
pub use frontmatter::{ParsedSkill, is_valid_skill_name, parse_skill_file};
pub use registry::{
    LoadedSkill, RankedSkill, SkillListing, SkillProvider, SkillScope, SkillSnapshot, Skills,
    SkillsChange,
};
pub use summary::{ResourceBase, SkillInvocation, SkillSummary};

/// Provides the [`Skills`] registry in the root service layer (first boot phase), so the
/// provider and tool plugins find it in their `start` hooks.
fn register(ctx: &dsh_kernel::Context) -> Result<(), dsh_kernel::BoxError> {
    ctx.provide(std::sync::Arc::new(Skills::new(ctx.clone())))?
        .detach();
    Ok(())
}

dsh_kernel::plugin! {
    register = register,
}
