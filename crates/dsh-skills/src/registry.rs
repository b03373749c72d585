//! The registry service: providers, ranked merging, snapshots and `skills/change`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use dsh_kernel::Context;

use crate::{SkillError, SkillSummary};

dsh_kernel::event! {
    /// `skills/change` (emit, no payload): a scope's snapshot differs from the last one
    /// [`Skills::snapshot`] returned for it (a skill appeared, went away, or its summary
    /// changed). Consumers re-read the snapshot.
    pub struct SkillsChange: emit("skills/change") => ();
}

/// What skills are looked up for: the project (workspace) root of the asking agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SkillScope {
    /// The project root (`None`: an agent without a workspace; only user-level roots apply).
    pub project_root: Option<PathBuf>,
}

impl SkillScope {
    /// A scope for `root`.
    pub fn project(root: impl Into<PathBuf>) -> Self {
        Self {
            project_root: Some(root.into()),
        }
    }
}

/// One listed skill with its rank (lower wins a duplicate name across and within providers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankedSkill {
    /// The rank (the filesystem provider's roots: 100 … 600, docs/upstream/skills.md).
    pub rank: u32,
    /// The summary.
    pub summary: SkillSummary,
}

/// A provider's answer for one scope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillListing {
    /// The skills found (any order; duplicates allowed, the lowest rank wins).
    pub skills: Vec<RankedSkill>,
    /// False when the provider could not list everything (the catalog then keeps its last
    /// view instead of announcing removals).
    pub complete: bool,
}

/// A source of skills.
pub trait SkillProvider: Send + Sync + 'static {
    /// The provider id (the summaries' `provider`).
    fn id(&self) -> &str;
    /// Lists the skills visible in `scope`. Invalid entries are the provider's to report
    /// (warn once) and leave out.
    fn list(&self, scope: &SkillScope) -> SkillListing;
    /// Reads the body of a skill this provider listed (re-read on every load).
    ///
    /// # Errors
    /// [`SkillError::Read`] or a parse error when the file changed into something invalid.
    fn load(&self, skill: &SkillSummary) -> Result<String, SkillError>;
}

/// The merged, name-sorted view of every provider for one scope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillSnapshot {
    /// One entry per name (the lowest rank's), sorted by name.
    pub skills: Vec<SkillSummary>,
    /// Every provider answered completely.
    pub complete: bool,
}

/// A loaded skill: its summary and its current body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedSkill {
    /// The summary it was listed with.
    pub summary: SkillSummary,
    /// The body (trimmed Markdown after the frontmatter).
    pub content: String,
}

/// The skills registry: a kernel service (`ctx.get::<Skills>()`), provided by the dsh-skills
/// plugin. Providers are added by other plugins in their `start` hooks.
pub struct Skills {
    ctx: Context,
    providers: RwLock<Vec<Arc<dyn SkillProvider>>>,
    last: Mutex<HashMap<SkillScope, SkillSnapshot>>,
}

impl std::fmt::Debug for Skills {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Skills").finish_non_exhaustive()
    }
}

impl Skills {
    /// An empty registry emitting [`SkillsChange`] through `ctx`.
    pub fn new(ctx: Context) -> Self {
        Self {
            ctx,
            providers: RwLock::new(Vec::new()),
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Adds a provider (listed after the ones already added; a tie in rank goes to the
    /// earlier provider).
    pub fn add_provider(&self, provider: Arc<dyn SkillProvider>) {
        self.providers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(provider);
    }

    fn providers(&self) -> Vec<Arc<dyn SkillProvider>> {
        self.providers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Lists every provider for `scope` and merges by rank. Emits [`SkillsChange`] when the
    /// result differs from the previous snapshot of the same scope (not on the first one).
    pub fn snapshot(&self, scope: &SkillScope) -> SkillSnapshot {
        let mut best: BTreeMap<String, (u32, SkillSummary)> = BTreeMap::new();
        let mut complete = true;
        for provider in self.providers() {
            let listing = provider.list(scope);
            complete &= listing.complete;
            for s in listing.skills {
                match best.get(&s.summary.name) {
                    Some((rank, _)) if *rank <= s.rank => {}
                    _ => {
                        best.insert(s.summary.name.clone(), (s.rank, s.summary));
                    }
                }
            }
        }
        let snapshot = SkillSnapshot {
            skills: best.into_values().map(|(_, s)| s).collect(),
            complete,
        };
        let changed = {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            let previous = last.insert(scope.clone(), snapshot.clone());
            previous.is_some_and(|p| p != snapshot)
        };
        if changed {
            self.ctx.emit::<SkillsChange>(&());
        }
        snapshot
    }

    /// The summary of `name` in `scope`'s snapshot.
    pub fn get(&self, scope: &SkillScope, name: &str) -> Option<SkillSummary> {
        self.snapshot(scope)
            .skills
            .into_iter()
            .find(|s| s.name == name)
    }

    /// Loads `name` in `scope`: its summary and a fresh read of its body.
    ///
    /// # Errors
    /// [`SkillError::Unknown`] when no provider lists it; the provider's load error.
    pub fn load(&self, scope: &SkillScope, name: &str) -> Result<LoadedSkill, SkillError> {
        let summary = self
            .get(scope, name)
            .ok_or_else(|| SkillError::Unknown(name.to_owned()))?;
        let provider = self
            .providers()
            .into_iter()
            .find(|p| p.id() == summary.provider)
            .ok_or_else(|| SkillError::Unknown(name.to_owned()))?;
        let content = provider.load(&summary)?;
        Ok(LoadedSkill { summary, content })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::SkillInvocation;

    struct Fixed(Mutex<Vec<RankedSkill>>);

    fn skill(name: &str, rank: u32, source: &str) -> RankedSkill {
        RankedSkill {
            rank,
            summary: SkillSummary {
                name: name.into(),
                description: format!("{name} from {source}"),
                when_to_use: None,
                invocation: SkillInvocation::default(),
                source: source.into(),
                provider: "fixed".into(),
                resource_base: None,
                location: PathBuf::new(),
            },
        }
    }

    impl SkillProvider for Fixed {
        fn id(&self) -> &str {
            "fixed"
        }
        fn list(&self, _: &SkillScope) -> SkillListing {
            SkillListing {
                skills: self.0.lock().unwrap().clone(),
                complete: true,
            }
        }
        fn load(&self, s: &SkillSummary) -> Result<String, SkillError> {
            Ok(format!("body of {}", s.description))
        }
    }

    #[test]
    fn the_lower_rank_wins_and_changes_are_emitted() {
        let kernel = dsh_kernel::Kernel::new();
        let changes = Arc::new(AtomicUsize::new(0));
        let c = changes.clone();
        kernel
            .root()
            .on_emit::<SkillsChange>(move |_| {
                c.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap()
            .detach();
        let skills = Skills::new(kernel.root().clone());
        let provider = Arc::new(Fixed(Mutex::new(vec![
            skill("b", 250, "project-claude"),
            skill("a", 400, "dsh-home"),
            skill("b", 100, "project"),
        ])));
        skills.add_provider(provider.clone());
        let scope = SkillScope::project("/p");
        let snap = skills.snapshot(&scope);
        let got: Vec<(&str, &str)> = snap
            .skills
            .iter()
            .map(|s| (s.name.as_str(), s.source.as_str()))
            .collect();
        assert_eq!(got, [("a", "dsh-home"), ("b", "project")]);
        assert_eq!(changes.load(Ordering::SeqCst), 0);
        skills.snapshot(&scope);
        assert_eq!(changes.load(Ordering::SeqCst), 0);
        provider.0.lock().unwrap().pop();
        assert_eq!(skills.get(&scope, "b").unwrap().source, "project-claude");
        assert_eq!(changes.load(Ordering::SeqCst), 1);
        assert_eq!(
            skills.load(&scope, "a").unwrap().content,
            "body of a from dsh-home"
        );
        assert_eq!(
            skills.load(&scope, "zz").unwrap_err().to_string(),
            "skill \"zz\" is unknown or no longer available"
        );
    }
}
