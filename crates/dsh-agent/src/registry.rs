//! The [`AgentRegistry`] service (`ctx.agents`): create and resume agents through the factory
//! the loop registers, list them, relate owners, and carry the initiating agent through the
//! driver's async chain.
//!
//! See docs/upstream/agent-loop.md (Agent registry and lifecycle).

use std::sync::{Arc, Mutex, RwLock};

use dsh_kernel::Disposer;
use dsh_session::SessionEvent;
use futures::future::BoxFuture;

use crate::handle::{Agent, AgentOptions};
use crate::lifecycle::{AgentDisposed, AgentNotice};

tokio::task_local! {
    static INITIATOR: Agent;
}

/// What a new agent needs.
#[derive(Debug, Clone, Default)]
pub struct CreateAgentOptions {
    /// Agent/session id (`None` = a fresh time-ordered UUID).
    pub id: Option<String>,
    /// Request defaults.
    pub options: AgentOptions,
    /// Absolute workspace root recorded in the session header.
    pub cwd: Option<String>,
    /// The owning agent (subagents).
    pub owner: Option<Agent>,
    /// Seed events (fork).
    pub seed: Option<Vec<SessionEvent>>,
    /// Parent session id recorded in the header (forks, subagents).
    pub parent_session: Option<String>,
}

/// What resuming a persisted agent needs.
#[derive(Debug, Clone, Default)]
pub struct ResumeAgentOptions {
    /// The persisted session id.
    pub id: String,
    /// Request defaults (provider/model may differ from the logged ones).
    pub options: AgentOptions,
    /// The owning agent.
    pub owner: Option<Agent>,
}

/// Registry failures.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum RegistryError {
    /// No agent factory is registered (no loop linked). Code `NO_AGENT_FACTORY`.
    #[error(
        "no agent factory is registered (the dsh-agent-loop plugin is disabled or not in this \
         harness's plugin set)"
    )]
    #[code("NO_AGENT_FACTORY")]
    NoFactory,
    /// An agent with this id is already live. Code `DUPLICATE_AGENT`.
    #[error("agent `{0}` is already live")]
    #[code("DUPLICATE_AGENT")]
    Duplicate(String),
    /// The factory failed. Code `AGENT_FACTORY_FAILED`.
    #[error("agent factory failed: {0}")]
    #[code("AGENT_FACTORY_FAILED")]
    Factory(dsh_kernel::BoxError),
}

/// Builds agents; implemented by the agent loop.
pub trait AgentFactory: Send + Sync + 'static {
    /// Creates, publishes (registry, `session/created`, `agent/created`,
    /// `agent/session-start{startup}`) and returns a new agent.
    fn create(
        &self,
        opts: CreateAgentOptions,
    ) -> BoxFuture<'static, Result<Agent, dsh_kernel::BoxError>>;
    /// Loads, repairs and publishes a persisted agent (`agent/session-start{resume}`).
    fn resume(
        &self,
        opts: ResumeAgentOptions,
    ) -> BoxFuture<'static, Result<Agent, dsh_kernel::BoxError>>;
}

#[derive(Default)]
struct Entries {
    agents: Vec<(Agent, Option<Agent>)>,
    /// The ids of `agents`, for O(1) duplicate checks (registering must not cost O(live
    /// agents)).
    ids: std::collections::HashSet<String>,
}

impl Entries {
    /// Removes `agent` (this very agent, not just its id) if it is registered.
    fn remove(&mut self, agent: &Agent) {
        let before = self.agents.len();
        self.agents.retain(|(a, _)| a != agent);
        if self.agents.len() < before {
            self.ids.remove(agent.id().as_str());
        }
    }
}

/// The live-agent registry. Provided as `Arc<AgentRegistry>` by this crate's plugin.
#[derive(Default)]
pub struct AgentRegistry {
    factory: RwLock<Option<Arc<dyn AgentFactory>>>,
    entries: Mutex<Entries>,
}

impl std::fmt::Debug for AgentRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentRegistry")
            .field("agents", &self.list().len())
            .finish()
    }
}

impl AgentRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs the factory (the loop does this in its plugin); the returned effect removes it.
    pub fn set_factory(self: &Arc<Self>, factory: Arc<dyn AgentFactory>) -> Vec<Disposer> {
        *self.factory.write().unwrap_or_else(|e| e.into_inner()) = Some(factory);
        let this = self.clone();
        vec![Disposer::infallible(move || {
            *this.factory.write().unwrap_or_else(|e| e.into_inner()) = None;
        })]
    }

    fn factory(&self) -> Result<Arc<dyn AgentFactory>, RegistryError> {
        self.factory
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(RegistryError::NoFactory)
    }

    /// Creates an agent through the factory.
    ///
    /// # Errors
    /// [`RegistryError::NoFactory`], [`RegistryError::Duplicate`], [`RegistryError::Factory`].
    pub async fn create(&self, opts: CreateAgentOptions) -> Result<Agent, RegistryError> {
        if let Some(id) = &opts.id
            && self.get(id).is_some()
        {
            return Err(RegistryError::Duplicate(id.clone()));
        }
        self.factory()?
            .create(opts)
            .await
            .map_err(RegistryError::Factory)
    }

    /// Resumes a persisted agent through the factory.
    ///
    /// # Errors
    /// As [`AgentRegistry::create`].
    pub async fn resume(&self, opts: ResumeAgentOptions) -> Result<Agent, RegistryError> {
        if self.get(&opts.id).is_some() {
            return Err(RegistryError::Duplicate(opts.id.clone()));
        }
        self.factory()?
            .resume(opts)
            .await
            .map_err(RegistryError::Factory)
    }

    /// Adds a live agent (factories call this before publishing).
    ///
    /// # Errors
    /// [`RegistryError::Duplicate`] for a live id.
    pub fn register(&self, agent: Agent, owner: Option<Agent>) -> Result<(), RegistryError> {
        let mut e = self.lock();
        if e.ids.contains(agent.id().as_str()) {
            return Err(RegistryError::Duplicate(agent.id().to_string()));
        }
        e.ids.insert(agent.id().to_string());
        e.agents.push((agent, owner));
        Ok(())
    }

    /// The live agent with `id`.
    pub fn get(&self, id: &str) -> Option<Agent> {
        self.lock()
            .agents
            .iter()
            .find(|(a, _)| a.id().as_str() == id)
            .map(|(a, _)| a.clone())
    }

    /// Every live agent, in creation order.
    pub fn list(&self) -> Vec<Agent> {
        self.lock().agents.iter().map(|(a, _)| a.clone()).collect()
    }

    /// Live agents without an owner.
    pub fn roots(&self) -> Vec<Agent> {
        self.lock()
            .agents
            .iter()
            .filter(|(_, o)| o.is_none())
            .map(|(a, _)| a.clone())
            .collect()
    }

    /// The owner of a live agent.
    pub fn owner_of(&self, agent: &Agent) -> Option<Agent> {
        self.lock()
            .agents
            .iter()
            .find(|(a, _)| a == agent)
            .and_then(|(_, o)| o.clone())
    }

    /// Disposes a live agent: drains its driver (cause `disposed`), unwinds its scope, removes
    /// it and emits `agent/disposed`. Returns false for an unknown id.
    pub async fn dispose(&self, id: &str) -> bool {
        let Some(agent) = self.get(id) else {
            return false;
        };
        agent.shutdown().await;
        agent.ctx().dispose().await;
        self.lock().remove(&agent);
        agent
            .ctx()
            .parent()
            .unwrap_or_else(|| agent.ctx().clone())
            .dispatch_to(Some(agent.key()))
            .emit::<AgentDisposed>(&AgentNotice {
                agent: agent.clone(),
            });
        true
    }

    /// Disposes every live agent (binary shutdown).
    pub async fn dispose_all(&self) {
        for a in self.list() {
            self.dispose(a.id().as_str()).await;
        }
    }

    /// A registration that removes `agent` when dropped (factories use it to roll back).
    pub fn unregister_on_drop(self: &Arc<Self>, agent: &Agent) -> Vec<Disposer> {
        let this = self.clone();
        let agent = agent.clone();
        vec![Disposer::infallible(move || {
            this.lock().remove(&agent);
        })]
    }
}

/// Runs `fut` with `agent` as the initiating agent (readable with [`current_initiator`]).
pub async fn with_initiator<F: std::future::Future>(agent: Agent, fut: F) -> F::Output {
    INITIATOR.scope(agent, fut).await
}

/// The agent whose driver chain is running the current task, if any. Its presence proves
/// neither liveness nor authority.
pub fn current_initiator() -> Option<Agent> {
    INITIATOR.try_with(|a| a.clone()).ok()
}
