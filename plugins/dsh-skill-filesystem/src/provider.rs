//! The filesystem skill provider: upstream's roots and ranks plus Claude Code's.
//!
//! See docs/upstream/skills.md ("Discovery").

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use dsh_skills::{
    ParsedSkill, RankedSkill, ResourceBase, SkillError, SkillListing, SkillProvider, SkillScope,
    SkillSummary, parse_skill_file,
};

/// The provider id (the summaries' `provider`).
pub const PROVIDER_ID: &str = "filesystem";

/// The skill file name inside a skill folder.
pub const SKILL_FILE: &str = "SKILL.md";

/// Where a warning about an invalid skill file goes (path, error); called once per file and
/// error text.
pub type WarnSink = Arc<dyn Fn(&Path, &SkillError) + Send + Sync>;

/// One skill root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillRoot {
    /// Lower wins a duplicate name.
    pub rank: u32,
    /// The summaries' `source`.
    pub source: &'static str,
    /// The directory scanned (one level: `<name>/SKILL.md` or `<name>.md`).
    pub dir: PathBuf,
}

/// The user-level locations, resolved once at start.
#[derive(Debug, Clone, Default)]
pub struct Homes {
    /// `$DSH_HOME` (default `~/.dsh`): `<dsh_home>/skills`, rank 400.
    pub dsh_home: Option<PathBuf>,
    /// `$DSH_AGENTS_HOME` (default `~/.agents`): `<agents_home>/skills`, rank 500.
    pub agents_home: Option<PathBuf>,
    /// The home directory: `~/.claude/skills`, rank 550.
    pub home: Option<PathBuf>,
    /// `$DSH_BUNDLED_SKILL_DIR`, rank 600.
    pub bundled: Option<PathBuf>,
}

/// A parsed file remembered by modification time and length (`None`: invalid, already
/// reported).
type CacheEntry = (Option<SystemTime>, u64, Option<ParsedSkill>);

/// Skills from the filesystem roots (ranks: 100 `<project>/.dsh/skills`, 200
/// `<project>/.agents/skills`, 250 `<project>/.claude/skills`, 300 custom dirs, 400
/// `$DSH_HOME/skills`, 500 `~/.agents/skills`, 550 `~/.claude/skills`, 600 bundled).
pub struct FsSkillProvider {
    custom: Vec<PathBuf>,
    homes: Homes,
    warn: WarnSink,
    warned: Mutex<HashSet<(PathBuf, String)>>,
    cache: Mutex<HashMap<PathBuf, CacheEntry>>,
}

impl std::fmt::Debug for FsSkillProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FsSkillProvider")
            .field("custom", &self.custom)
            .field("homes", &self.homes)
            .finish_non_exhaustive()
    }
}

fn expand_home(dir: &str, home: Option<&Path>) -> PathBuf {
    match (dir.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => h.join(rest),
        _ if dir == "~" => home.map(Path::to_path_buf).unwrap_or_else(|| dir.into()),
        _ => PathBuf::from(dir),
    }
}

impl FsSkillProvider {
    /// A provider over `custom` dirs (`[skills] dirs`: `~/` expanded, relative ones against
    /// the project root) and `homes`; invalid files are reported to `warn`.
    pub fn new(custom: Vec<String>, homes: Homes, warn: WarnSink) -> Self {
        let custom = custom
            .iter()
            .map(|d| expand_home(d, homes.home.as_deref()))
            .collect();
        Self {
            custom,
            homes,
            warn,
            warned: Mutex::new(HashSet::new()),
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The roots for `scope`, by rank.
    pub fn roots(&self, scope: &SkillScope) -> Vec<SkillRoot> {
        let mut roots = Vec::new();
        let root = |rank, source, dir: PathBuf| SkillRoot { rank, source, dir };
        if let Some(p) = &scope.project_root {
            roots.push(root(100, "project", p.join(".dsh/skills")));
            roots.push(root(200, "project-agents", p.join(".agents/skills")));
            roots.push(root(250, "project-claude", p.join(".claude/skills")));
        }
        for d in &self.custom {
            let dir = match (&scope.project_root, d.is_relative()) {
                (Some(p), true) => p.join(d),
                (None, true) => continue,
                _ => d.clone(),
            };
            roots.push(root(300, "custom", dir));
        }
        if let Some(h) = &self.homes.dsh_home {
            roots.push(root(400, "dsh-home", h.join("skills")));
        }
        if let Some(h) = &self.homes.agents_home {
            roots.push(root(500, "agents-home", h.join("skills")));
        }
        if let Some(h) = &self.homes.home {
            roots.push(root(550, "claude-home", h.join(".claude/skills")));
        }
        if let Some(b) = &self.homes.bundled {
            roots.push(root(600, "bundled", b.clone()));
        }
        roots
    }

    fn warn_once(&self, path: &Path, err: &SkillError) {
        let key = (path.to_path_buf(), err.to_string());
        let fresh = self
            .warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key);
        if fresh {
            (self.warn)(path, err);
        }
    }

    /// Parses `file` (cached by modification time and length). `Ok(None)`: the unchanged
    /// file was invalid and has been reported.
    fn parse(&self, file: &Path) -> Result<Option<ParsedSkill>, SkillError> {
        let meta = std::fs::metadata(file).map_err(|e| read_error(file, &e))?;
        let stamp = (meta.modified().ok(), meta.len());
        if let Some((m, l, r)) = self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(file)
            && (*m, *l) == stamp
        {
            return Ok(r.clone());
        }
        let parsed = read_and_parse(file);
        let cached = parsed.as_ref().ok().cloned();
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(file.to_path_buf(), (stamp.0, stamp.1, cached));
        parsed.map(Some)
    }

    fn scan(&self, root: &SkillRoot, out: &mut Vec<RankedSkill>) -> bool {
        let entries = match std::fs::read_dir(&root.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => return true,
            Err(e) => {
                tracing::warn!(target: "dsh_skill_filesystem", dir = %root.dir.display(), "cannot list skills: {e}");
                return false;
            }
        };
        let mut names: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        names.sort();
        for path in names {
            let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if file_name.starts_with('.') {
                continue;
            }
            let (file, base) = if path.is_dir() {
                let f = path.join(SKILL_FILE);
                if !f.is_file() {
                    continue;
                }
                (f, path.clone())
            } else if file_name.ends_with(".md") && path.is_file() {
                (path.clone(), root.dir.clone())
            } else {
                continue;
            };
            match self.parse(&file) {
                Ok(None) => {}
                Ok(Some(p)) => out.push(RankedSkill {
                    rank: root.rank,
                    summary: SkillSummary {
                        name: p.name,
                        description: p.description,
                        when_to_use: p.when_to_use,
                        invocation: p.invocation,
                        source: root.source.to_owned(),
                        provider: PROVIDER_ID.to_owned(),
                        resource_base: Some(ResourceBase::Directory { path: base }),
                        location: file,
                    },
                }),
                Err(e) => self.warn_once(&file, &e),
            }
        }
        true
    }
}

fn read_error(file: &Path, e: &std::io::Error) -> SkillError {
    SkillError::Read {
        path: file.to_path_buf(),
        message: e.to_string(),
    }
}

fn read_and_parse(file: &Path) -> Result<ParsedSkill, SkillError> {
    let text = std::fs::read_to_string(file).map_err(|e| read_error(file, &e))?;
    parse_skill_file(&text)
}

impl SkillProvider for FsSkillProvider {
    fn id(&self) -> &str {
        PROVIDER_ID
    }

    fn list(&self, scope: &SkillScope) -> SkillListing {
        let mut skills = Vec::new();
        let mut complete = true;
        for root in self.roots(scope) {
            complete &= self.scan(&root, &mut skills);
        }
        SkillListing { skills, complete }
    }

    fn load(&self, skill: &SkillSummary) -> Result<String, SkillError> {
        Ok(read_and_parse(&skill.location)?.body)
    }
}
