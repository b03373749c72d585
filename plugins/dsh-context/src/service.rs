//! The plugin's service ([`ContextService`]): the per-agent AGENTS.md cache, the insertion
//! of the AGENTS.md sections into an assembly, and the git state cache (docs/upstream/context.md,
//! "The git context").

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_agent::AgentInfo;
use dsh_fs::Workspace;
use dsh_system_prompt::{AssembleContext, AssembleRequest, AssembledSection};

use crate::agents::load_agents_files_under;
use crate::{
    AGENTS_SECTION_PREFIX, AGENTS_VARIABLE_PREFIX, AgentsFile, ENVIRONMENT_SECTION, GitOptions,
    GitRepo, agents_section_text, git_state, locate_repo,
};

/// The agent's [`AgentInfo`] for one assembly, when the loop assembles for an agent.
pub(crate) fn agent_info(cx: &AssembleContext) -> Option<Arc<AgentInfo>> {
    cx.agent.as_ref()?.get::<AgentInfo>()
}

pub(crate) fn agent_cwd(cx: &AssembleContext) -> Option<String> {
    agent_info(cx)?.cwd.clone()
}

/// One agent's git context text and the workspace generation it was read at.
#[derive(Debug)]
struct GitEntry {
    generation: u64,
    text: Option<String>,
}

/// The git state cache of [`ContextService`].
#[derive(Debug, Default)]
struct GitCache {
    /// Bumped by [`ContextService::workspace_changed`]; an entry read at an older generation
    /// is stale.
    generation: u64,
    /// The located work tree per cwd (`None`: not in one), for the life of the service.
    repos: HashMap<PathBuf, Option<GitRepo>>,
    /// The last git context text per agent id.
    states: HashMap<String, GitEntry>,
}

/// The plugin's service (provided as `Arc<ContextService>`): the per-agent AGENTS.md cache and
/// the git state cache.
///
/// Git state: the work tree of a cwd is located once ([`locate_repo`]: one `git rev-parse`,
/// shared by the AGENTS.md discovery and the git context); an agent's git context text is read
/// at its first assembly and then reused until [`ContextService::invalidate_git`] (the plugin
/// calls it on the agent's `turn/start`) or [`ContextService::workspace_changed`] (after a tool
/// call that may have changed the work tree).
#[derive(Debug)]
pub struct ContextService {
    dsh_home: Option<PathBuf>,
    git_options: GitOptions,
    cache: Mutex<HashMap<String, Arc<Vec<AgentsFile>>>>,
    git: Mutex<GitCache>,
}

impl ContextService {
    /// A service looking up `$DSH_HOME/AGENTS.md` in `dsh_home`, reading git with the default
    /// [`GitOptions`].
    pub fn new(dsh_home: Option<PathBuf>) -> Self {
        Self {
            dsh_home,
            git_options: GitOptions::default(),
            cache: Mutex::new(HashMap::new()),
            git: Mutex::new(GitCache::default()),
        }
    }

    /// The same service reading git with `options`.
    pub fn with_git_options(mut self, options: GitOptions) -> Self {
        self.git_options = options;
        self
    }

    /// The AGENTS.md files of agent `agent_id` with workspace `cwd`: loaded on the first call
    /// for that id, then served from the cache (later changes to the files are not seen). The
    /// chain starts at the git root of `cwd`; see [`Self::agents_files_in`].
    pub fn agents_files(&self, agent_id: &str, cwd: &Path) -> Arc<Vec<AgentsFile>> {
        self.agents_files_in(agent_id, cwd, None)
    }

    /// [`Self::agents_files`] in a run whose workspace root is `run_root` (the host's
    /// [`dsh_fs::WORKSPACE_FACT`]): the chain starts at the workspace root of `cwd`
    /// ([`Workspace::for_session`]: `run_root` when it contains `cwd` — `-C DIR` or the nearest
    /// `.git` ancestor of the launch directory — else the nearest `.git` ancestor of `cwd`);
    /// `None` ⇒ the git root of `cwd`, as before the run root was known.
    pub fn agents_files_in(
        &self,
        agent_id: &str,
        cwd: &Path,
        run_root: Option<&Path>,
    ) -> Arc<Vec<AgentsFile>> {
        if let Some(hit) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent_id)
        {
            return hit.clone();
        }
        let root = match run_root {
            Some(r) => Workspace::for_session(Some(r), Some(cwd), None)
                .ok()
                .map(|w| w.root),
            None => self.repo(cwd).map(|r| r.root),
        };
        let files = Arc::new(load_agents_files_under(cwd, root, self.dsh_home.as_deref()));
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(agent_id.to_owned())
            .or_insert(files)
            .clone()
    }

    /// The work tree containing `cwd` ([`locate_repo`]), located on the first call for that
    /// directory and then served from the cache (`None`: not in a work tree, or no git).
    pub fn repo(&self, cwd: &Path) -> Option<GitRepo> {
        if let Some(hit) = self
            .git
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .repos
            .get(cwd)
        {
            return hit.clone();
        }
        let repo = locate_repo(cwd, self.git_options.timeout);
        self.git
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .repos
            .insert(cwd.to_path_buf(), repo.clone());
        repo
    }

    /// The `context:git` text of agent `agent_id` with workspace `cwd` ([`git_state`]), read
    /// again only when the agent has no text since its last [`Self::invalidate_git`] or the
    /// last [`Self::workspace_changed`]; `None` when `cwd` is not in a work tree or git fails.
    pub fn git_text(&self, agent_id: &str, cwd: &Path) -> Option<String> {
        let generation = {
            let git = self.git.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(entry) = git.states.get(agent_id)
                && entry.generation == git.generation
            {
                return entry.text.clone();
            }
            git.generation
        };
        let text = self
            .repo(cwd)
            .and_then(|repo| git_state(cwd, &repo, &self.git_options));
        // Stamped with the generation seen before git ran: a tool that changed the tree
        // meanwhile makes the next call read again.
        self.git
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .states
            .insert(
                agent_id.to_owned(),
                GitEntry {
                    generation,
                    text: text.clone(),
                },
            );
        text
    }

    /// The next [`Self::git_text`] of `agent_id` reads git again (a new turn).
    pub fn invalidate_git(&self, agent_id: &str) {
        self.git
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .states
            .remove(agent_id);
    }

    /// The work tree may have changed (a tool wrote files or ran a command): the next
    /// [`Self::git_text`] of every agent reads git again. Agents may share a work tree, so
    /// this is not per agent.
    pub fn workspace_changed(&self) {
        let mut git = self.git.lock().unwrap_or_else(|p| p.into_inner());
        git.generation = git.generation.wrapping_add(1);
    }

    /// Drops an agent's cached files and git state.
    pub fn forget(&self, agent_id: &str) {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(agent_id);
        self.invalidate_git(agent_id);
    }

    /// Inserts the AGENTS.md sections (and their variables) for the request's agent into the
    /// assembly: right after [`ENVIRONMENT_SECTION`], or at the end when it is absent. No agent
    /// or no cwd ⇒ unchanged.
    pub fn add_agents_sections(&self, req: &mut AssembleRequest) {
        let Some(info) = agent_info(&req.context) else {
            return;
        };
        let Some(cwd) = info.cwd.as_deref() else {
            return;
        };
        let settings = req
            .context
            .agent
            .as_ref()
            .map(dsh_kernel::Context::settings);
        let run_root = settings
            .as_ref()
            .and_then(|s| s.fact_str(dsh_fs::WORKSPACE_FACT))
            .map(Path::new);
        let files = self.agents_files_in(&info.id, Path::new(cwd), run_root);
        if files.is_empty() {
            return;
        }
        let assembly = &mut req.assembly;
        let at = assembly
            .sections
            .iter()
            .position(|s| s.name == ENVIRONMENT_SECTION)
            .map_or(assembly.sections.len(), |i| i + 1);
        let mut added = Vec::with_capacity(files.len());
        for (i, file) in files.iter().enumerate() {
            let var = format!("{AGENTS_VARIABLE_PREFIX}{}", i + 1);
            assembly
                .variables
                .insert(var.clone(), Some(agents_section_text(file)));
            added.push(AssembledSection::new(
                format!("{AGENTS_SECTION_PREFIX}{}", file.path.display()),
                format!("{{{{{var}}}}}"),
            ));
        }
        assembly.sections.splice(at..at, added);
    }
}
