//! The child environment: the ambient environment minus credential-shaped names, minus the
//! password helpers ([`UNSET_NAMES`]) and minus ambient `DSH_*`, then the non-interactive
//! overrides ([`ENV_OVERRIDES`]), then caller entries, then managed `DSH_*` facts (upstream
//! order: scrubbed ambient → `env` → `dshEnv`).
//!
//! Behaviour notes: `docs/tools.md` ("Process executor" and "Shell and job tools": env order);
//! the scrub pattern is upstream's `SENSITIVE_ENV_PATTERN` (`KEY|PASSWORD|SECRET|TOKEN`,
//! case-insensitive) plus `PASSWD` and `CREDENTIAL`. `PATH`, `HOME`, `LANG`/`LC_*`, `USER`,
//! `SHELL`, proxies and everything else that does not look like a credential survive; `TERM` is
//! forced to `dumb`; git never prompts (`GIT_TERMINAL_PROMPT=0`) and every editor is `true`
//! (a dsh addition: the child has no terminal to prompt on).

use std::collections::BTreeMap;

/// Prefix of harness-managed variables; ambient ones are dropped, managed ones merge last.
pub const DSH_ENV_PREFIX: &str = "DSH_";

/// Substrings (matched case-insensitively) that mark a variable name as a credential.
pub const SENSITIVE_NAME_PARTS: &[&str] =
    &["KEY", "PASSWORD", "PASSWD", "SECRET", "TOKEN", "CREDENTIAL"];

/// Overrides that keep tool output free of colours, pagers and interactive terminal features
/// (upstream `ENV_OVERRIDES`: the first four), and keep commands from waiting for an answer
/// nobody can give (dsh: the child runs without a terminal): git fails instead of asking for
/// credentials, an editor git or another tool opens exits at once, leaving the text unchanged.
/// Applied after the scrub and before caller entries.
pub const ENV_OVERRIDES: &[(&str, &str)] = &[
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GCM_INTERACTIVE", "never"),
    ("GIT_EDITOR", "true"),
    ("GIT_SEQUENCE_EDITOR", "true"),
    ("EDITOR", "true"),
    ("VISUAL", "true"),
    ("DEBIAN_FRONTEND", "noninteractive"),
];

/// Ambient variables removed from the child environment: password helpers that would open a
/// window or a prompt (`GIT_ASKPASS`, `SSH_ASKPASS`, `SUDO_ASKPASS`) and `SSH_ASKPASS_REQUIRE`
/// (which makes ssh use one). Without them git and ssh fail with a message instead of asking.
pub const UNSET_NAMES: &[&str] = &[
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "SSH_ASKPASS_REQUIRE",
    "SUDO_ASKPASS",
];

/// True if `name` looks like a credential (`*_API_KEY`, `GITHUB_TOKEN`, `AWS_SECRET_ACCESS_KEY`…).
pub fn is_sensitive_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SENSITIVE_NAME_PARTS.iter().any(|p| upper.contains(p))
}

/// The scrubbed ambient environment of this process (sorted by name): credential-shaped names,
/// [`UNSET_NAMES`] and every `DSH_*` name removed. Non-UTF-8 entries are dropped.
pub fn scrubbed_ambient() -> BTreeMap<String, String> {
    scrub(
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
    )
}

/// Applies the scrub to an explicit list of entries (the testable core of [`scrubbed_ambient`]).
pub fn scrub(vars: impl IntoIterator<Item = (String, String)>) -> BTreeMap<String, String> {
    vars.into_iter()
        .filter(|(k, _)| {
            !is_sensitive_name(k)
                && !UNSET_NAMES.contains(&k.as_str())
                && !k.to_ascii_uppercase().starts_with(DSH_ENV_PREFIX)
        })
        .collect()
}

/// The complete child environment: `ambient` (already scrubbed) → [`ENV_OVERRIDES`] → `env` →
/// `dsh_env` (only names starting with `DSH_` are taken from `dsh_env`).
pub fn child_env(
    ambient: BTreeMap<String, String>,
    env: &BTreeMap<String, String>,
    dsh_env: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = ambient;
    for (k, v) in ENV_OVERRIDES {
        out.insert((*k).to_string(), (*v).to_string());
    }
    for (k, v) in env {
        out.insert(k.clone(), v.clone());
    }
    for (k, v) in dsh_env {
        if k.starts_with(DSH_ENV_PREFIX) {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_drops_credentials_and_ambient_dsh() {
        let got = scrub(
            [
                ("PATH", "/bin"),
                ("HOME", "/h"),
                ("LANG", "C.UTF-8"),
                ("DEEPSEEK_API_KEY", "x"),
                ("GITHUB_TOKEN", "x"),
                ("aws_secret_access_key", "x"),
                ("DB_PASSWORD", "x"),
                ("DSH_SESSION", "stale"),
                ("TERM", "xterm"),
                ("GIT_ASKPASS", "/usr/lib/ssh/ssh-askpass"),
                ("SSH_ASKPASS", "/usr/lib/ssh/ssh-askpass"),
            ]
            .map(|(a, b)| (a.to_string(), b.to_string())),
        );
        let names: Vec<&str> = got.keys().map(String::as_str).collect();
        assert_eq!(names, vec!["HOME", "LANG", "PATH", "TERM"]);
    }

    #[test]
    fn merge_order_managed_last() {
        let ambient = scrub([("PATH".to_string(), "/bin".to_string())]);
        let env = BTreeMap::from([
            ("TERM".to_string(), "xterm".to_string()),
            ("DSH_X".to_string(), "caller".to_string()),
        ]);
        let dsh = BTreeMap::from([
            ("DSH_X".to_string(), "managed".to_string()),
            ("OTHER".to_string(), "no".to_string()),
        ]);
        let got = child_env(ambient, &env, &dsh);
        assert_eq!(got.get("TERM").map(String::as_str), Some("xterm"));
        assert_eq!(got.get("DSH_X").map(String::as_str), Some("managed"));
        assert_eq!(got.get("OTHER"), None);
        assert_eq!(got.get("PAGER").map(String::as_str), Some("cat"));
        assert_eq!(
            got.get("GIT_TERMINAL_PROMPT").map(String::as_str),
            Some("0")
        );
        assert_eq!(got.get("GIT_EDITOR").map(String::as_str), Some("true"));
        assert_eq!(got.get("EDITOR").map(String::as_str), Some("true"));
    }
}
