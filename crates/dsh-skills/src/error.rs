//! The crate's typed errors.

use std::path::PathBuf;

/// Errors of the skills seam: parsing a `SKILL.md` file and loading a skill.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum SkillError {
    /// The file does not start with a `---` frontmatter block closed by a `---` line.
    #[error("missing frontmatter: the file must start with a `---` line and close it with another")]
    #[code("SKILL_NO_FRONTMATTER")]
    NoFrontmatter,
    /// The frontmatter is not valid YAML or not a mapping.
    #[error("invalid frontmatter: {0}")]
    #[code("SKILL_INVALID_FRONTMATTER")]
    Yaml(String),
    /// A required key is missing or not a non-empty string.
    #[error("frontmatter key `{0}` is required (a non-empty string)")]
    #[code("SKILL_MISSING_KEY")]
    MissingKey(&'static str),
    /// A key has the wrong type.
    #[error("frontmatter key `{key}` must be {expected}")]
    #[code("SKILL_INVALID_KEY")]
    InvalidKey {
        /// The key.
        key: String,
        /// What it must be.
        expected: &'static str,
    },
    /// The name does not match `^[a-z0-9]+(?:-[a-z0-9]+)*$`.
    #[error("invalid skill name {0:?}: lowercase letters, digits and single hyphens only")]
    #[code("SKILL_INVALID_NAME")]
    InvalidName(String),
    /// A legacy camelCase invocation key (`disableModelInvocation`, `userInvocable`).
    #[error("legacy key `{0}` is not supported: use `disable-model-invocation` / `user-invocable`")]
    #[code("SKILL_LEGACY_KEY")]
    LegacyKey(String),
    /// The skill is not (or no longer) listed.
    #[error("skill {0:?} is unknown or no longer available")]
    #[code("SKILL_UNKNOWN")]
    Unknown(String),
    /// The skill's file could not be read.
    #[error("cannot read skill file {path}: {message}")]
    #[code("SKILL_READ")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error text.
        message: String,
    },
}
