//! The workspace dependency graph and its forbidden arrows (`docs/ARCHITECTURE.md`,
//! "Dependency graph"). Read from the members' `Cargo.toml` files (no `cargo metadata` call, so
//! the check is quick and needs no network or lock update).

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Which table of `Cargo.toml` a dependency is declared in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `[dependencies]`.
    Normal,
    /// `[dev-dependencies]`.
    Dev,
    /// `[build-dependencies]`.
    Build,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Normal => "dependency",
            Self::Dev => "dev-dependency",
            Self::Build => "build-dependency",
        })
    }
}

/// The role of a workspace member, from its folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `crates/dsh-kernel`.
    Kernel,
    /// `crates/dsh`: the binary that links everything.
    Binary,
    /// `crates/dsh-test-support`, `crates/dsh-shared-corpus`: test infrastructure.
    TestInfra,
    /// Every other `crates/*`: the seam crates (vocabulary and services plugins build on).
    Seam,
    /// `plugins/*`: optional capabilities.
    Plugin,
    /// `tests/` and `tests/dsh-testplugin-*`: the workspace test crates.
    Tests,
    /// `xtask/`.
    Xtask,
}

/// One workspace member as the graph check sees it.
#[derive(Debug, Clone)]
pub struct Member {
    /// The package name.
    pub name: String,
    /// The member folder.
    pub dir: PathBuf,
    /// Its role (from the folder).
    pub role: Role,
    /// Every declared dependency with the table it is in (workspace and external alike).
    pub deps: Vec<(String, Kind)>,
}

/// One forbidden arrow found in the graph.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// The depending package.
    pub from: String,
    /// The dependency.
    pub to: String,
    /// The table it is declared in.
    pub kind: Kind,
    /// The rule it breaks (one line of `docs/ARCHITECTURE.md`, "Dependency graph").
    pub rule: &'static str,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` → `{}` ({}): {}",
            self.from, self.to, self.kind, self.rule
        )
    }
}

/// Arrows that are forbidden but still present while another change removes them. The graph
/// test fails if one of these is no longer present (remove it here then), and tidy reports
/// them without failing.
pub const PENDING: &[(&str, &str)] = &[];

/// Low-level seam crates and the only workspace crates they may depend on (normal
/// dependencies): the bottom of the layering.
const LOW_LEVEL: &[(&str, &[&str])] = &[
    ("dsh-llm", &["dsh-kernel"]),
    ("dsh-fs", &["dsh-kernel"]),
    ("dsh-session", &["dsh-kernel", "dsh-llm"]),
];

/// The rules, in the order `docs/ARCHITECTURE.md` lists them.
pub const RULE_KERNEL: &str =
    "the kernel depends on no workspace crate (but its own macro crate, dsh-kernel-macros)";
/// See [`RULE_KERNEL`].
pub const RULE_PLUGIN_PLUGIN: &str = "a plugin depends on no other plugin";
/// See [`RULE_KERNEL`].
pub const RULE_SEAM_PLUGIN: &str = "a seam crate depends on no plugin";
/// See [`RULE_KERNEL`].
pub const RULE_LOOP: &str =
    "only the binary links the agent loop (plugins and seams use dsh-agent's vocabulary)";
/// See [`RULE_KERNEL`].
pub const RULE_LOOP_PERSISTENCE: &str =
    "the agent loop does not depend on the persistence seam (resume goes through a service)";
/// See [`RULE_KERNEL`].
pub const RULE_TEST_INFRA: &str = "test infrastructure is only a dev- or build-dependency";
/// See [`RULE_KERNEL`].
pub const RULE_BINARY: &str =
    "nothing depends on the dsh crate but as a dev-dependency (an example or test harness)";
/// See [`RULE_KERNEL`].
pub const RULE_LOW_LEVEL: &str = "a low-level seam crate depends only on the crates below it";

/// Reads every workspace member under `root` (`crates/*`, `plugins/*`, `tests`,
/// `tests/dsh-testplugin-*`, `xtask`).
///
/// # Errors
/// A member `Cargo.toml` that cannot be read or parsed.
pub fn members(root: &Path) -> Result<Vec<Member>> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for group in ["crates", "plugins", "tests"] {
        if let Ok(entries) = std::fs::read_dir(root.join(group)) {
            dirs.extend(
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.join("Cargo.toml").is_file()),
            );
        }
    }
    dirs.push(root.join("tests"));
    dirs.push(root.join("xtask"));
    dirs.sort();
    let mut out = Vec::new();
    for dir in dirs {
        let path = dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let doc: toml::Table = text
            .parse()
            .with_context(|| format!("parsing {}", path.display()))?;
        let name = doc
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .unwrap_or_default()
            .to_owned();
        let mut deps = Vec::new();
        for (table, kind) in [
            ("dependencies", Kind::Normal),
            ("dev-dependencies", Kind::Dev),
            ("build-dependencies", Kind::Build),
        ] {
            if let Some(t) = doc.get(table).and_then(|t| t.as_table()) {
                deps.extend(t.keys().map(|k| (k.clone(), kind)));
            }
        }
        let role = role_of(root, &dir, &name);
        out.push(Member {
            name,
            dir,
            role,
            deps,
        });
    }
    Ok(out)
}

fn role_of(root: &Path, dir: &Path, name: &str) -> Role {
    let parent = dir.parent();
    if dir == root.join("xtask") {
        Role::Xtask
    } else if dir == root.join("tests") || parent == Some(&root.join("tests")) {
        Role::Tests
    } else if parent == Some(&root.join("plugins")) {
        Role::Plugin
    } else {
        match name {
            "dsh-kernel" => Role::Kernel,
            "dsh" => Role::Binary,
            "dsh-test-support" | "dsh-shared-corpus" => Role::TestInfra,
            _ => Role::Seam,
        }
    }
}

/// Every forbidden arrow among `members` (sorted), pending ones included.
#[must_use]
pub fn violations(members: &[Member]) -> Vec<Violation> {
    let role = |n: &str| members.iter().find(|m| m.name == n).map(|m| m.role);
    let mut out = Vec::new();
    for m in members {
        for (dep, kind) in &m.deps {
            let Some(to) = role(dep) else {
                continue; // an external crate
            };
            let mut push = |rule: &'static str| {
                out.push(Violation {
                    from: m.name.clone(),
                    to: dep.clone(),
                    kind: *kind,
                    rule,
                });
            };
            let shipped = *kind != Kind::Dev;
            // The kernel's own proc-macro crate (the `ErrorCode` derive) is part of the kernel.
            if m.role == Role::Kernel && dep != "dsh-kernel-macros" {
                push(RULE_KERNEL);
            }
            if m.role == Role::Plugin && to == Role::Plugin {
                push(RULE_PLUGIN_PLUGIN);
            }
            if m.role == Role::Seam && to == Role::Plugin {
                push(RULE_SEAM_PLUGIN);
            }
            if dep == "dsh-agent-loop"
                && shipped
                && matches!(m.role, Role::Plugin | Role::Seam | Role::TestInfra)
            {
                push(RULE_LOOP);
            }
            if m.name == "dsh-agent-loop" && dep == "dsh-persistence" && shipped {
                push(RULE_LOOP_PERSISTENCE);
            }
            if to == Role::TestInfra && *kind == Kind::Normal && m.role != Role::TestInfra {
                push(RULE_TEST_INFRA);
            }
            if to == Role::Binary && *kind != Kind::Dev {
                push(RULE_BINARY);
            }
            if *kind == Kind::Normal
                && let Some((_, allowed)) = LOW_LEVEL.iter().find(|(n, _)| *n == m.name)
                && !allowed.contains(&dep.as_str())
            {
                push(RULE_LOW_LEVEL);
            }
        }
    }
    out.sort();
    out
}

/// Whether `v` is one of the [`PENDING`] arrows.
#[must_use]
pub fn is_pending(v: &Violation) -> bool {
    PENDING
        .iter()
        .any(|(from, to)| v.from == *from && v.to == *to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, role: Role, deps: &[(&str, Kind)]) -> Member {
        Member {
            name: name.to_owned(),
            dir: PathBuf::new(),
            role,
            deps: deps.iter().map(|(d, k)| ((*d).to_owned(), *k)).collect(),
        }
    }

    fn arrows(v: &[Violation]) -> Vec<(String, String, Kind, &'static str)> {
        v.iter()
            .map(|v| (v.from.clone(), v.to.clone(), v.kind, v.rule))
            .collect()
    }

    /// The real workspace: no forbidden arrow except the pending ones, and every pending one is
    /// still there (so the list stays accurate). `cargo test -p xtask` and the workspace
    /// nextest run both run this.
    #[test]
    fn workspace_dependency_graph_has_no_forbidden_arrows() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let members = members(root).unwrap();
        assert!(members.iter().any(|m| m.name == "dsh-kernel"));
        let all = violations(&members);
        let unexpected: Vec<String> = all
            .iter()
            .filter(|v| !is_pending(v))
            .map(ToString::to_string)
            .collect();
        assert_eq!(unexpected, Vec::<String>::new(), "forbidden arrows");
        for (from, to) in PENDING {
            assert!(
                all.iter().any(|v| v.from == *from && v.to == *to),
                "`{from}` → `{to}` is in arch::PENDING but no longer in the graph: remove it there"
            );
        }
    }

    #[test]
    fn every_rule_fires_on_a_synthetic_graph() {
        let members = vec![
            member("dsh-kernel", Role::Kernel, &[("dsh-llm", Kind::Dev)]),
            member(
                "dsh-llm",
                Role::Seam,
                &[
                    ("dsh-kernel", Kind::Normal),
                    ("dsh-session", Kind::Normal),
                    ("serde", Kind::Normal),
                ],
            ),
            member(
                "dsh-session",
                Role::Seam,
                &[("dsh-kernel", Kind::Normal), ("dsh-llm", Kind::Normal)],
            ),
            member(
                "dsh-agent-loop",
                Role::Seam,
                &[("dsh-persistence", Kind::Normal), ("p-two", Kind::Dev)],
            ),
            member(
                "dsh-persistence",
                Role::Seam,
                &[("dsh-test-support", Kind::Normal)],
            ),
            member("dsh-test-support", Role::TestInfra, &[]),
            member(
                "dsh",
                Role::Binary,
                &[("dsh-agent-loop", Kind::Normal), ("p-one", Kind::Normal)],
            ),
            member(
                "p-one",
                Role::Plugin,
                &[
                    ("p-two", Kind::Dev),
                    ("dsh-agent-loop", Kind::Normal),
                    ("dsh", Kind::Normal),
                ],
            ),
            member(
                "p-two",
                Role::Plugin,
                &[
                    ("dsh-agent-loop", Kind::Dev),
                    ("dsh-test-support", Kind::Dev),
                ],
            ),
        ];
        assert_eq!(
            arrows(&violations(&members)),
            vec![
                (
                    "dsh-agent-loop".into(),
                    "dsh-persistence".into(),
                    Kind::Normal,
                    RULE_LOOP_PERSISTENCE
                ),
                (
                    "dsh-agent-loop".into(),
                    "p-two".into(),
                    Kind::Dev,
                    RULE_SEAM_PLUGIN
                ),
                (
                    "dsh-kernel".into(),
                    "dsh-llm".into(),
                    Kind::Dev,
                    RULE_KERNEL
                ),
                (
                    "dsh-llm".into(),
                    "dsh-session".into(),
                    Kind::Normal,
                    RULE_LOW_LEVEL
                ),
                (
                    "dsh-persistence".into(),
                    "dsh-test-support".into(),
                    Kind::Normal,
                    RULE_TEST_INFRA
                ),
                ("p-one".into(), "dsh".into(), Kind::Normal, RULE_BINARY),
                (
                    "p-one".into(),
                    "dsh-agent-loop".into(),
                    Kind::Normal,
                    RULE_LOOP
                ),
                (
                    "p-one".into(),
                    "p-two".into(),
                    Kind::Dev,
                    RULE_PLUGIN_PLUGIN
                ),
            ]
        );
    }

    #[test]
    fn roles_come_from_folders() {
        let root = Path::new("/r");
        assert_eq!(
            role_of(root, &root.join("crates/dsh-kernel"), "dsh-kernel"),
            Role::Kernel
        );
        assert_eq!(role_of(root, &root.join("crates/dsh"), "dsh"), Role::Binary);
        assert_eq!(
            role_of(
                root,
                &root.join("crates/dsh-shared-corpus"),
                "dsh-shared-corpus"
            ),
            Role::TestInfra
        );
        assert_eq!(
            role_of(root, &root.join("crates/dsh-agent"), "dsh-agent"),
            Role::Seam
        );
        assert_eq!(
            role_of(root, &root.join("plugins/dsh-context"), "dsh-context"),
            Role::Plugin
        );
        assert_eq!(role_of(root, &root.join("tests"), "dsh-tests"), Role::Tests);
        assert_eq!(
            role_of(
                root,
                &root.join("tests/dsh-testplugin-alpha"),
                "dsh-testplugin-alpha"
            ),
            Role::Tests
        );
        assert_eq!(role_of(root, &root.join("xtask"), "xtask"), Role::Xtask);
    }
}
