//! The plugin's service ([`ContextService`]): the per-agent AGENTS.md cache and the insertion
//! of the AGENTS.md sections into an assembly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_agent::AgentInfo;
use dsh_system_prompt::{AssembleContext, AssembleRequest, AssembledSection};

use crate::{
    AGENTS_SECTION_PREFIX, AGENTS_VARIABLE_PREFIX, AgentsFile, ENVIRONMENT_SECTION,
    agents_section_text, load_agents_files,
};

/// The agent's [`AgentInfo`] for one assembly, when the loop assembles for an agent.
pub(crate) fn agent_info(cx: &AssembleContext) -> Option<Arc<AgentInfo>> {
    cx.agent.as_ref()?.get::<AgentInfo>()
}

pub(crate) fn agent_cwd(cx: &AssembleContext) -> Option<String> {
    agent_info(cx)?.cwd.clone()
}

/// The plugin's service (provided as `Arc<ContextService>`): the per-agent AGENTS.md cache.
#[derive(Debug)]
pub struct ContextService {
    dsh_home: Option<PathBuf>,
    cache: Mutex<HashMap<String, Arc<Vec<AgentsFile>>>>,
}

impl ContextService {
    /// A service looking up `$DSH_HOME/AGENTS.md` in `dsh_home`.
    pub fn new(dsh_home: Option<PathBuf>) -> Self {
        Self {
            dsh_home,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// The AGENTS.md files of agent `agent_id` with workspace `cwd`: loaded on the first call
    /// for that id, then served from the cache (later changes to the files are not seen).
    pub fn agents_files(&self, agent_id: &str, cwd: &Path) -> Arc<Vec<AgentsFile>> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .entry(agent_id.to_owned())
            .or_insert_with(|| Arc::new(load_agents_files(cwd, self.dsh_home.as_deref())))
            .clone()
    }

    /// Drops an agent's cached files.
    pub fn forget(&self, agent_id: &str) {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(agent_id);
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
        let files = self.agents_files(&info.id, Path::new(cwd));
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
