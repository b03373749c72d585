//! The agent factory ([`AgentLoop`], and [`SharedLoop`] as the registry holds it): creating and
//! resuming agents, each with its scope, session, inbox and turn runner.

use std::sync::Arc;

use dsh_agent::lifecycle::{
    AgentCreated, AgentNotice, AgentSessionStart, SessionStart, SessionStartSource,
};
use dsh_agent::{
    Agent, AgentFactory, AgentRegistry, CreateAgentOptions, Inbox, ResumeAgentOptions,
};
use dsh_kernel::{BoxError, Context, ScopeKey};
use dsh_session::{CreateOptions, SessionHeader, SessionStore, now_ms};
use futures::future::BoxFuture;

use crate::{AgentInfo, LoopConfig, LoopError, Runner, prompt};

/// The agent factory (`ctx.agentLoop`), installed into the [`AgentRegistry`] by this crate's
/// plugin.
pub struct AgentLoop {
    ctx: Context,
    config: LoopConfig,
    render_cache: Arc<std::sync::Mutex<Option<prompt::RenderCache>>>,
}

impl std::fmt::Debug for AgentLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentLoop")
            .field("config", &self.config)
            .finish()
    }
}

impl AgentLoop {
    /// A factory creating agents under `ctx` (agent scopes are tagged children of it).
    pub fn new(ctx: Context, config: LoopConfig) -> Self {
        Self {
            ctx,
            config,
            render_cache: Arc::default(),
        }
    }

    fn publish(
        &self,
        agent: &Agent,
        owner: Option<Agent>,
        source: SessionStartSource,
    ) -> Result<(), BoxError> {
        let registry = self
            .ctx
            .get::<AgentRegistry>()
            .ok_or(LoopError::MissingService("AgentRegistry"))?;
        registry.register(agent.clone(), owner)?;
        let d = self.ctx.dispatch_to(Some(agent.key()));
        d.emit::<AgentCreated>(&AgentNotice {
            agent: agent.clone(),
        });
        d.emit::<AgentSessionStart>(&SessionStart {
            agent: agent.clone(),
            source,
        });
        Ok(())
    }

    /// The agent over `session`: its runner, its `AgentInfo` in `agent_ctx`, registered and
    /// announced (`agent/created`, `agent/session-start` with `source`).
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one agent, each used once"
    )]
    fn assemble(
        &self,
        key: ScopeKey,
        agent_ctx: Context,
        session: Arc<dsh_session::Session>,
        inbox: Inbox,
        options: dsh_agent::AgentOptions,
        owner: Option<Agent>,
        source: SessionStartSource,
    ) -> Result<Agent, BoxError> {
        let runner = Runner::new(
            self.ctx.clone(),
            self.config.clone(),
            self.render_cache.clone(),
        );
        agent_ctx
            .provide(Arc::new(AgentInfo {
                id: session.id().to_owned(),
                cwd: session.header().cwd.clone(),
            }))?
            .detach();
        let agent = Agent::new(key, agent_ctx, session, inbox, options, Arc::new(runner));
        self.publish(&agent, owner, source)?;
        Ok(agent)
    }

    fn store(&self) -> Result<Arc<SessionStore>, LoopError> {
        self.ctx
            .get::<SessionStore>()
            .ok_or(LoopError::MissingService("SessionStore"))
    }

    /// Creates a fresh agent (see [`AgentFactory::create`]).
    ///
    /// # Errors
    /// [`LoopError::MissingService`], session creation errors, registry errors.
    pub fn create_agent(&self, opts: CreateAgentOptions) -> Result<Agent, BoxError> {
        let id = opts
            .id
            .clone()
            .unwrap_or_else(|| dsh_llm::SessionId::fresh().to_string());
        let key = ScopeKey::new(format!("agent:{id}"));
        if let Some(owner) = &opts.owner {
            key.bind_parent(owner.key())?;
        }
        let mut header = SessionHeader::new(id.clone(), now_ms());
        header.cwd = opts.cwd.clone();
        header.parent_session = opts.parent_session.clone();
        let agent_ctx = self.ctx.tagged(key.clone(), format!("agent:{id}"))?;
        let session = self.store()?.create(
            Some(id),
            CreateOptions {
                seed: opts.seed.clone(),
                meta: Some(header),
                owner: Some(key.clone()),
            },
        )?;
        let inbox = Inbox::new(session.clone());
        self.assemble(
            key,
            agent_ctx,
            session,
            inbox,
            opts.options,
            opts.owner,
            SessionStartSource::Startup,
        )
    }

    /// Resumes a persisted agent (see [`AgentFactory::resume`]).
    ///
    /// # Errors
    /// [`LoopError::NoPersistence`], load/repair errors, restore errors, registry errors.
    pub async fn resume_agent(&self, opts: ResumeAgentOptions) -> Result<Agent, BoxError> {
        let loader = self
            .ctx
            .get::<dsh_agent::SessionLoader>()
            .ok_or_else(|| LoopError::NoPersistence(opts.id.clone()))?;
        let loaded = loader.load(&opts.id).await?;
        let key = ScopeKey::new(format!("agent:{}", opts.id));
        if let Some(owner) = &opts.owner {
            key.bind_parent(owner.key())?;
        }
        let agent_ctx = self.ctx.tagged(key.clone(), format!("agent:{}", opts.id))?;
        let session = self
            .store()?
            .restore(loaded.events, loaded.header, Some(key.clone()))?;
        let inbox = Inbox::restore(session.clone());
        self.assemble(
            key,
            agent_ctx,
            session,
            inbox,
            opts.options,
            opts.owner,
            SessionStartSource::Resume,
        )
    }
}

/// The factory as the registry sees it (an `Arc` so futures can own it).
#[derive(Debug, Clone)]
pub struct SharedLoop(pub Arc<AgentLoop>);

impl AgentFactory for SharedLoop {
    fn create(&self, opts: CreateAgentOptions) -> BoxFuture<'static, Result<Agent, BoxError>> {
        let r = self.0.create_agent(opts);
        Box::pin(async move { r })
    }

    fn resume(&self, opts: ResumeAgentOptions) -> BoxFuture<'static, Result<Agent, BoxError>> {
        let this = self.0.clone();
        Box::pin(async move { this.resume_agent(opts).await })
    }
}
