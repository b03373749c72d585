//! The `SKILL.md` format: a YAML frontmatter block between `---` lines, then a Markdown body.
//!
//! See docs/upstream/skills.md ("SKILL.md").

use serde_json::{Map, Value};

use crate::SkillError;
use crate::summary::SkillInvocation;

/// A parsed `SKILL.md` file.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedSkill {
    /// `name` (validated by [`is_valid_skill_name`]).
    pub name: String,
    /// `description` (non-empty).
    pub description: String,
    /// `whenToUse` (or Claude Code's `when_to_use`).
    pub when_to_use: Option<String>,
    /// From `disable-model-invocation` and `user-invocable`.
    pub invocation: SkillInvocation,
    /// Every other frontmatter key, as JSON.
    pub metadata: Map<String, Value>,
    /// The body: the text after the closing `---` line, trimmed.
    pub body: String,
}

/// Whether `name` matches `^[a-z0-9]+(?:-[a-z0-9]+)*$` (upstream's skill-name rule).
pub fn is_valid_skill_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Splits `text` into (frontmatter, body). The first line must be `---`; the block ends at the
/// next line that is exactly `---` (trailing spaces and `\r` ignored).
fn split(text: &str) -> Option<(&str, &str)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first_end = text.find('\n')?;
    if text[..first_end].trim_end() != "---" {
        return None;
    }
    let rest = &text[first_end + 1..];
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Some((&rest[..offset], &rest[offset + line.len()..]));
        }
        offset += line.len();
    }
    None
}

fn optional_bool(map: &Map<String, Value>, key: &str, default: bool) -> Result<bool, SkillError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(SkillError::InvalidKey {
            key: key.to_owned(),
            expected: "a boolean",
        }),
    }
}

fn required_string(map: &Map<String, Value>, key: &'static str) -> Result<String, SkillError> {
    match map.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_owned()),
        _ => Err(SkillError::MissingKey(key)),
    }
}

/// Parses a whole `SKILL.md` text.
///
/// Rules (upstream's, docs/upstream/skills.md): required `name` (a valid skill name) and
/// `description` (non-empty strings); optional `whenToUse` (dsh also reads Claude Code's
/// `when_to_use`), `disable-model-invocation` (bool, default false) and `user-invocable`
/// (bool, default true); the legacy camelCase keys `disableModelInvocation` and
/// `userInvocable` are an error; every other key goes to `metadata`.
///
/// # Errors
/// [`SkillError::NoFrontmatter`], [`SkillError::Yaml`] (not YAML or not a mapping),
/// [`SkillError::MissingKey`], [`SkillError::InvalidKey`], [`SkillError::InvalidName`],
/// [`SkillError::LegacyKey`].
pub fn parse_skill_file(text: &str) -> Result<ParsedSkill, SkillError> {
    let (front, body) = split(text).ok_or(SkillError::NoFrontmatter)?;
    let value: Value = if front.trim().is_empty() {
        Value::Object(Map::new())
    } else {
        serde_yaml_ng::from_str(front).map_err(|e| SkillError::Yaml(e.to_string()))?
    };
    let Value::Object(mut map) = value else {
        return Err(SkillError::Yaml("the frontmatter is not a mapping".into()));
    };
    for legacy in ["disableModelInvocation", "userInvocable"] {
        if map.contains_key(legacy) {
            return Err(SkillError::LegacyKey(legacy.to_owned()));
        }
    }
    let name = required_string(&map, "name")?;
    if !is_valid_skill_name(&name) {
        return Err(SkillError::InvalidName(name));
    }
    let description = required_string(&map, "description")?;
    let when_to_use = match map.get("whenToUse").or_else(|| map.get("when_to_use")) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.trim().to_owned()),
        Some(_) => {
            return Err(SkillError::InvalidKey {
                key: "whenToUse".into(),
                expected: "a string",
            });
        }
    };
    let invocation = SkillInvocation {
        model_invocable: !optional_bool(&map, "disable-model-invocation", false)?,
        user_invocable: optional_bool(&map, "user-invocable", true)?,
    };
    for known in [
        "name",
        "description",
        "whenToUse",
        "when_to_use",
        "disable-model-invocation",
        "user-invocable",
    ] {
        map.remove(known);
    }
    Ok(ParsedSkill {
        name,
        description,
        when_to_use,
        invocation,
        metadata: map,
        body: body.trim().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses() {
        let p = parse_skill_file(
            "---\nname: pdf-tools\ndescription: Work with PDFs.\nwhenToUse: when asked\nuser-invocable: false\nallowed-tools: [bash]\n---\n\n# Body\n\ntext\n",
        )
        .unwrap();
        assert_eq!(p.name, "pdf-tools");
        assert_eq!(p.description, "Work with PDFs.");
        assert_eq!(p.when_to_use.as_deref(), Some("when asked"));
        assert_eq!(
            p.invocation,
            SkillInvocation {
                model_invocable: true,
                user_invocable: false
            }
        );
        assert_eq!(
            Value::Object(p.metadata),
            serde_json::json!({"allowed-tools": ["bash"]})
        );
        assert_eq!(p.body, "# Body\n\ntext");
    }

    #[test]
    fn bad_files_are_typed_errors() {
        let code = |t: &str| {
            use dsh_kernel::ErrorCode;
            parse_skill_file(t).unwrap_err().code()
        };
        assert_eq!(code("no frontmatter"), "SKILL_NO_FRONTMATTER");
        assert_eq!(code("---\nname: [a\n---\n"), "SKILL_INVALID_FRONTMATTER");
        assert_eq!(code("---\n- a\n---\n"), "SKILL_INVALID_FRONTMATTER");
        assert_eq!(code("---\ndescription: d\n---\n"), "SKILL_MISSING_KEY");
        assert_eq!(
            code("---\nname: Bad_Name\ndescription: d\n---\n"),
            "SKILL_INVALID_NAME"
        );
        assert_eq!(
            code("---\nname: a\ndescription: d\nuserInvocable: true\n---\n"),
            "SKILL_LEGACY_KEY"
        );
        assert_eq!(
            code("---\nname: a\ndescription: d\nuser-invocable: yes please\n---\n"),
            "SKILL_INVALID_KEY"
        );
    }

    #[test]
    fn names() {
        for ok in ["a", "a-b", "a1-2b"] {
            assert!(is_valid_skill_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a--b", "A", "a_b", "a b"] {
            assert!(!is_valid_skill_name(bad), "{bad}");
        }
    }
}
