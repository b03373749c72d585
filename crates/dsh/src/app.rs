//! Booting the harness for one run: settings → kernel → plugins (the persistence seam opens the
//! backend its settings name), and the agent to work with (fresh, resumed, or continued); and the
//! session store of the session commands ([`Storage`]).

use dsh_kernel::ErrorCode;
use std::sync::Arc;

use anyhow::{Result, anyhow};
use dsh_agent::{Agent, AgentOptions, AgentRegistry, CreateAgentOptions, ResumeAgentOptions};
use dsh_kernel::Kernel;
use dsh_llm::LlmService;
use dsh_persistence::{
    PersistenceBackends, PersistenceError, PersistenceService, SessionHeader, SharedPersistence,
};
use dsh_session::{EventTypeRegistry, SessionStore};

use crate::settings::Config;

/// A booted harness.
pub struct App {
    /// The kernel (root scope + plugin scopes).
    pub kernel: Kernel,
    /// The run's configuration.
    pub config: Config,
    /// `ctx.agents`.
    pub agents: Arc<AgentRegistry>,
    /// `ctx.sessions`.
    pub sessions: Arc<SessionStore>,
}

/// A usage/configuration error (exit code 2).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The session store of `config` for the session commands: a kernel booted with every linked
/// plugin (a plugin that fails to start is logged, not fatal: the store does not need it) and the
/// persistence seam it provides. The backend is the one the `[persistence]` settings name; this
/// binary knows none by name.
pub struct Storage {
    kernel: Kernel,
    service: Arc<PersistenceService>,
    types: Arc<EventTypeRegistry>,
    dir: std::path::PathBuf,
}

impl Storage {
    /// The root scope of the storage kernel (its settings: the `[models]` catalog overrides).
    pub(crate) fn root(&self) -> dsh_kernel::Context {
        self.kernel.root().clone()
    }

    /// Boots the plugins of `config` and finds the persistence seam.
    ///
    /// # Errors
    /// No persistence seam linked or started.
    pub async fn open(config: &Config) -> Result<Self> {
        let kernel = kernel_for(config)?;
        if let Err(e) = kernel.boot_with(&config.plugins).await {
            tracing::warn!(error = %e, "some plugins failed to start; the session store does not need them");
        }
        let service = kernel.root().get::<PersistenceService>().ok_or_else(|| {
            UsageError(
                "this harness stores no sessions: no session persistence plugin is in its \
                     plugin set (or it is disabled)"
                    .into(),
            )
        })?;
        let types = kernel
            .root()
            .get::<EventTypeRegistry>()
            .unwrap_or_else(EventTypeRegistry::shared_default);
        Ok(Self {
            kernel,
            service,
            types,
            dir: config.sessions_dir(),
        })
    }

    /// Another registered backend over the same sessions directory (e.g. to export into).
    ///
    /// # Errors
    /// [`UsageError`] for an unknown name (the message lists the registered ones); the
    /// backend's open failure.
    pub fn open_backend(&self, name: &str) -> Result<SharedPersistence> {
        let config = dsh_persistence::BackendConfig {
            dir: self.dir.clone(),
            registry: self.types.clone(),
        };
        self.backends()?.open(name, &config).map_err(|e| match e {
            PersistenceError::UnknownBackend { .. } => UsageError(e.to_string()).into(),
            other => anyhow!("opening backend `{name}`: {other} ({})", other.code()),
        })
    }

    /// The configured store.
    ///
    /// # Errors
    /// [`UsageError`] when persistence is off or the backend is unknown; the backend's open
    /// failure.
    pub fn store(&self) -> Result<SharedPersistence> {
        self.service.backend().map_err(|e| match e {
            PersistenceError::UnknownBackend { .. } => {
                UsageError(format!("persistence.backend: {e}")).into()
            }
            PersistenceError::Disabled => UsageError(format!("session store: {e}")).into(),
            other => anyhow!("opening the session store: {other} ({})", other.code()),
        })
    }

    /// The registered backends (for reading standalone session files).
    ///
    /// # Errors
    /// A host-given backend without a registry (not the case in this binary).
    pub fn backends(&self) -> Result<Arc<PersistenceBackends>> {
        self.service
            .backends()
            .cloned()
            .ok_or_else(|| anyhow!("no persistence backend registry"))
    }

    /// The stored session that `prefix` names (an exact id, or any unambiguous prefix of one).
    ///
    /// # Errors
    /// [`UsageError`] for no match or several (the message lists them); storage errors.
    pub fn resolve_id(&self, prefix: &str) -> Result<String> {
        let list = self
            .store()?
            .list()
            .map_err(|e| anyhow!("listing sessions: {e} ({})", e.code()))?;
        resolve_among(&list, prefix)
    }

    /// The event types a resume accepts: every booted plugin's declarations.
    pub fn types(&self) -> &Arc<EventTypeRegistry> {
        &self.types
    }

    /// Tears the kernel down (unregisters the plugin declarations).
    pub async fn close(self) {
        self.kernel.dispose().await;
    }
}

/// The id of `headers` that `prefix` names, newest first among ambiguous candidates. The
/// error is the [`dsh_persistence::IdLookupError`] (codes `SESSION_NOT_FOUND`,
/// `SESSION_ID_AMBIGUOUS`, both usage errors: `crate::exit`).
fn resolve_among(headers: &[SessionHeader], prefix: &str) -> Result<String> {
    let mut sorted: Vec<&SessionHeader> = headers.iter().collect();
    sorted.sort_by_key(|h| std::cmp::Reverse(h.created_at));
    dsh_persistence::resolve_id(sorted.iter().map(|h| h.id.as_str()), prefix)
        .map_err(anyhow::Error::from)
}

/// A kernel whose root scope holds the settings of `config` (nothing booted yet).
fn kernel_for(config: &Config) -> Result<Kernel> {
    let kernel = Kernel::new();
    kernel
        .root()
        .provide(Arc::new(config.kernel_settings()))
        .map_err(|e| anyhow!("{e}"))?
        .detach();
    Ok(kernel)
}

/// A core service is missing after boot: the plugin that provides it was disabled or is not in
/// the harness's preset (a configuration error, exit 2).
/// The message of a boot failure: one line per failed plugin, `plugin <id>: <error>` (the
/// kernel's own wording counts the failures, which reads as noise for the usual single one).
/// A plugin that failed only because a service of an earlier failed plugin is missing is a
/// consequence, not a cause: it is left out when another plugin failed for a reason of its own
/// (e.g. an invalid `[models]` table fails `dsh-llm`, whose missing service then fails every
/// plugin that requires it).
fn start_failure(e: &dsh_kernel::KernelError) -> String {
    match e {
        dsh_kernel::KernelError::PluginFailed { failures } => {
            let missing = |err: &dsh_kernel::BoxError| {
                err.downcast_ref::<dsh_kernel::KernelError>()
                    .is_some_and(|k| matches!(k, dsh_kernel::KernelError::MissingService { .. }))
            };
            let causes: Vec<_> = failures.iter().filter(|(_, err)| !missing(err)).collect();
            let shown = if causes.is_empty() {
                failures.iter().collect()
            } else {
                causes
            };
            shown
                .iter()
                .map(|(id, err)| format!("plugin {id}: {err}"))
                .collect::<Vec<_>>()
                .join("\n")
        }
        other => format!("plugins failed to start: {other}"),
    }
}

fn missing_core(e: &dsh_kernel::KernelError, plugin: &str) -> anyhow::Error {
    UsageError(format!(
        "{e}: the `{plugin}` plugin provides it; it is disabled (plugins.disable) or not in this \
         harness's plugin set"
    ))
    .into()
}

impl App {
    /// Boots the plugin set of `config` (its harness's preset minus `plugins.disable`) with the
    /// settings of `config`.
    ///
    /// # Errors
    /// A plugin that fails to apply (reported by id), a missing core service, or a storage
    /// that cannot be opened.
    pub async fn boot(config: Config) -> Result<Self> {
        // reqwest (rustls without a default provider) needs one installed before any client.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let kernel = kernel_for(&config)?;
        if let Err(e) = kernel.boot_with(&config.plugins).await {
            // Plugins fail to start on configuration they cannot use (a provider without a
            // base_url, an invalid section): a configuration error, exit 2.
            return Err(UsageError(start_failure(&e)).into());
        }
        // Refused hook files, once, and the hook bridges' notices on stderr.
        crate::hooks_cmd::attach(&kernel)?.detach();
        // Every backend plugin is applied now: open the configured one (fail early on a bad name).
        if let Some(persistence) = kernel.root().get::<PersistenceService>() {
            persistence
                .resolve()
                .map_err(|e| UsageError(format!("persistence.backend: {e}")))?;
        }
        let mut config = config;
        if config.model_is_default
            && let Some(llm) = kernel.root().get::<LlmService>()
            && let Ok(models) = llm.models(&config.provider)
        {
            // No layer chose a model: a route's first listed model beats the built-in default.
            let ids: Vec<String> = models.into_iter().map(|m| m.id).collect();
            config.model = config.model_for(&ids);
        }
        let agents = kernel
            .root()
            .require::<AgentRegistry>()
            .map_err(|e| missing_core(&e, "dsh-agent"))?;
        let sessions = kernel
            .root()
            .require::<SessionStore>()
            .map_err(|e| missing_core(&e, "dsh-session"))?;
        Ok(Self {
            kernel,
            config,
            agents,
            sessions,
        })
    }

    /// Fails with a one-paragraph message when the configured provider cannot be used.
    ///
    /// # Errors
    /// [`UsageError`] naming exactly what to set.
    pub fn check_provider(&self) -> Result<()> {
        self.check_route(&self.config.provider)
    }

    /// Fails with a one-paragraph message when the provider route `p` cannot be used (unknown,
    /// or its API key variable unset). A resumed session is checked on the route it resumes on
    /// ([`App::resume`]), not on the settings' route.
    ///
    /// # Errors
    /// [`UsageError`] naming exactly what to set.
    pub fn check_route(&self, p: &str) -> Result<()> {
        let llm = self
            .kernel
            .root()
            .require::<LlmService>()
            .map_err(|e| anyhow!("{e}"))?;
        match llm.provider_info(p) {
            None => {
                let known: Vec<String> = llm.list_providers().into_iter().map(|i| i.id).collect();
                Err(UsageError(format!(
                    "unknown provider `{p}`. Configured providers: {}. Define others in \
                     settings.toml under [providers.<id>] (base_url, api_key_env, models).",
                    known.join(", ")
                ))
                .into())
            }
            Some(info) if !info.configured => {
                Err(UsageError(info.setup_hint.unwrap_or_else(|| {
                    format!(
                        "provider `{p}` is not configured: set its API key environment variable"
                    )
                }))
                .into())
            }
            Some(_) => Ok(()),
        }
    }

    /// The request options a new session starts with: the configured provider, model and
    /// output-token limit.
    pub fn agent_options(&self) -> AgentOptions {
        self.options()
    }

    fn options(&self) -> AgentOptions {
        AgentOptions {
            provider: Some(self.config.provider.clone()),
            model: Some(self.config.model.clone()),
            max_tokens: self.config.max_tokens,
        }
    }

    /// A fresh agent on the workspace.
    ///
    /// # Errors
    /// Creation failures.
    pub async fn new_agent(&self) -> Result<Agent> {
        self.new_agent_with(self.options()).await
    }

    /// A fresh agent on the workspace with request options `options` (its header's `cwd` is the
    /// launch directory).
    ///
    /// # Errors
    /// Creation failures.
    pub async fn new_agent_with(&self, options: AgentOptions) -> Result<Agent> {
        self.agents
            .create(CreateAgentOptions {
                options,
                cwd: Some(self.config.launch_dir.display().to_string()),
                ..CreateAgentOptions::default()
            })
            .await
            .map_err(|e| anyhow::Error::new(e).context("creating the session"))
    }

    /// The persistence seam's store, `None` when persistence is off (`--ephemeral`).
    fn store(&self) -> Result<Option<SharedPersistence>> {
        let Some(service) = self.kernel.root().get::<PersistenceService>() else {
            return Ok(None);
        };
        match service.backend() {
            Ok(b) => Ok(Some(b)),
            Err(PersistenceError::Disabled) => Ok(None),
            Err(e) => Err(anyhow!("session store: {e} ({})", e.code())),
        }
    }

    /// Resumes the persisted session `prefix` names (its id or any unambiguous prefix of it) on
    /// the route [`crate::resume::choose_route`] picks (flags > the session's stored route and
    /// model > settings > default; a stored route this harness lacks is skipped, with a
    /// `warning: session … last used route …, which is not configured now; …` line on stderr
    /// unless the command line chose the route). An agent of
    /// that id already live in this process (the session left with `/new`) is re-attached
    /// instead of loaded again.
    ///
    /// # Errors
    /// [`UsageError`] without persistence, for an unknown or ambiguous id; load errors.
    pub async fn resume(&self, prefix: &str) -> Result<(Agent, crate::resume::RouteSource)> {
        let id = resolve_among(&self.stored_headers()?, prefix)?;
        let agent = match self.agents.get(&id) {
            Some(live) => live,
            None => self
                .agents
                .resume(ResumeAgentOptions {
                    id: id.clone(),
                    options: self.options(),
                    owner: None,
                })
                .await
                .map_err(|e| anyhow::Error::new(e).context(format!("resuming session `{id}`")))?,
        };
        // A stored route this harness no longer has (a `[providers.<id>]` since removed) is
        // not restored: the settings' route is used instead.
        // Stderr says so (the conversation goes to another provider than before).
        let llm = self.kernel.root().get::<LlmService>();
        let last = crate::resume::stored_route(agent.session().request_context_event().as_deref());
        let (stored, gone): (Option<_>, Option<_>) = match last {
            Some((p, m)) if llm.as_ref().is_some_and(|l| l.has_provider(&p)) => {
                (Some((p, m)), None)
            }
            other => (None, other),
        };
        let (provider, model, source) = crate::resume::choose_route(
            &self.config,
            stored.as_ref().map(|(p, m)| (p.as_str(), m.as_str())),
        );
        if let Some((p, m)) = gone
            && source != crate::resume::RouteSource::Flags
        {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "warning: session `{id}` last used route `{p}` (model `{m}`), which is not configured now; it continues on `{provider}` / `{model}` {} (`--provider`/`-m` choose another)",
                source.phrase()
            );
        }
        let mut options = agent.options();
        options.provider = Some(provider);
        options.model = Some(model);
        agent.set_options(options);
        Ok((agent, source))
    }

    /// Stored session headers, newest first.
    ///
    /// # Errors
    /// [`UsageError`] when persistence is off; storage errors.
    pub fn stored_headers(&self) -> Result<Vec<SessionHeader>> {
        let mut list = self
            .require_store()?
            .list()
            .map_err(|e| anyhow!("listing sessions: {e}"))?;
        list.sort_by_key(|h| std::cmp::Reverse(h.created_at));
        Ok(list)
    }

    /// Stored session summaries in list order: last activity, newest first
    /// ([`dsh_persistence::sort_by_activity`]).
    ///
    /// # Errors
    /// [`UsageError`] when persistence is off; storage errors.
    pub fn stored_sessions(&self) -> Result<Vec<dsh_persistence::SessionSummary>> {
        let mut rows = self
            .require_store()?
            .summaries()
            .map_err(|e| anyhow!("listing sessions: {e} ({})", e.code()))?;
        dsh_persistence::sort_by_activity(&mut rows);
        Ok(rows)
    }

    fn require_store(&self) -> Result<SharedPersistence> {
        self.store()?.ok_or_else(|| {
            UsageError("resuming a stored session needs persistence (drop --ephemeral)".into())
                .into()
        })
    }

    /// The session of this workspace with the latest activity that has at least one turn
    /// (`--continue`, `resume --last`): its header's `cwd` is the workspace root or below it.
    ///
    /// # Errors
    /// [`UsageError`] when there is none.
    pub fn last_session_id(&self) -> Result<String> {
        let root = &self.config.cwd;
        self.stored_sessions()?
            .into_iter()
            .find(|s| {
                s.turns > 0
                    && s.header
                        .cwd
                        .as_deref()
                        .is_some_and(|c| crate::workspace::contains(root, c))
            })
            .map(|s| s.header.id)
            .ok_or_else(|| UsageError(format!("no stored session for {}", root.display())).into())
    }

    /// Makes every accepted event of `agent`'s session durable.
    ///
    /// # Errors
    /// The flush failure (fail-closed).
    pub async fn flush(&self, agent: &Agent) -> Result<()> {
        self.sessions
            .flush(agent.session())
            .await
            .map(|_| ())
            .map_err(|e| anyhow!("saving the session failed: {e}"))
    }

    /// Leaves `agent` (the shell's `/new`, or `/resume` of another session): saves it, then
    /// disposes it, so its session's write lock is released and another `dsh` may resume it
    /// (`/resume` loads it from the store again).
    ///
    /// # Errors
    /// Saving failed (the agent is disposed anyway).
    pub async fn leave(&self, agent: &Agent) -> Result<()> {
        let saved = self.flush(agent).await;
        let id = agent.id().as_str().to_owned();
        self.agents.dispose(&id).await;
        self.sessions.dispose(&id);
        // `session/disposed` releases the backend writer (and its lock) on a spawned task;
        // release it here too, so the lock is gone when this returns (release is idempotent).
        if let Some(c) = self
            .kernel
            .root()
            .get::<PersistenceService>()
            .and_then(|p| p.coordinator().cloned())
        {
            let _ = c.release(&id).await;
        }
        saved
    }

    /// Drains every agent and tears the kernel down.
    pub async fn shutdown(self) {
        self.agents.dispose_all().await;
        self.kernel.dispose().await;
    }
}
