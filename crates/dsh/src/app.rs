//! Booting the harness for one run: settings → kernel → plugins → persistence backend, and the
//! agent to work with (fresh, resumed, or continued).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use dsh_agent::{Agent, AgentOptions, AgentRegistry, CreateAgentOptions, ResumeAgentOptions};
use dsh_kernel::Kernel;
use dsh_llm::LlmService;
use dsh_persistence::{PersistenceService, SessionHeader, SessionPersistence};
use dsh_session::SessionStore;

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

/// The storage seam for `config` without booting a kernel (session commands).
///
/// # Errors
/// Opening the SQLite database.
pub fn storage(config: &Config) -> Result<Arc<dyn SessionPersistence>> {
    let registry = dsh_session::EventTypeRegistry::shared_default();
    Ok(match config.backend().as_str() {
        "sqlite" => {
            std::fs::create_dir_all(config.sessions_dir())
                .with_context(|| format!("creating {}", config.sessions_dir().display()))?;
            dsh_persistence_sqlite::open_persistence(dsh_persistence_sqlite::SqliteConfig {
                path: dsh_persistence_sqlite::default_db_path(&config.sessions_dir()),
                pack_chunks: true,
            })
            .map_err(|e| anyhow!("opening the SQLite session store: {e}"))?
        }
        _ => Arc::new(dsh_persistence::Persistence::with_registry(
            dsh_persistence::JsonlBackend::new(dsh_persistence::JsonlConfig {
                root: config.sessions_dir().clone(),
                ..dsh_persistence::JsonlConfig::default()
            }),
            registry,
        )),
    })
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
        let kernel = Kernel::new();
        kernel
            .root()
            .provide(Arc::new(config.kernel_settings()))
            .map_err(|e| anyhow!("{e}"))?
            .detach();
        if let Err(e) = kernel.boot_with(&config.plugins).await {
            // Plugins fail to start on configuration they cannot use (a provider without a
            // base_url, an invalid section): a configuration error, exit 2.
            return Err(UsageError(format!("plugins failed to start: {e}")).into());
        }
        if config.persist && config.backend() == "sqlite" {
            let backend = storage(&config)?;
            dsh_persistence::install(
                kernel.root(),
                backend,
                Duration::from_millis(config.write_batch_ms()),
            )
            .map_err(|e| anyhow!("installing the SQLite session store: {e}"))?;
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
            .map_err(|e| anyhow!("{e}"))?;
        let sessions = kernel
            .root()
            .require::<SessionStore>()
            .map_err(|e| anyhow!("{e}"))?;
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
        let llm = self
            .kernel
            .root()
            .require::<LlmService>()
            .map_err(|e| anyhow!("{e}"))?;
        let p = &self.config.provider;
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
        self.agents
            .create(CreateAgentOptions {
                options: self.options(),
                cwd: Some(self.config.cwd.display().to_string()),
                ..CreateAgentOptions::default()
            })
            .await
            .map_err(|e| anyhow!("creating the session: {e}"))
    }

    /// Resumes a persisted session.
    ///
    /// # Errors
    /// [`UsageError`] without persistence or for an unknown id; load errors.
    pub async fn resume(&self, id: &str) -> Result<Agent> {
        if self.kernel.root().get::<PersistenceService>().is_none() {
            return Err(UsageError(
                "resuming a stored session needs persistence (drop --ephemeral)".into(),
            )
            .into());
        }
        if !self.stored_headers()?.iter().any(|h| h.id == id) {
            return Err(UsageError(format!(
                "no stored session `{id}` (see `dsh sessions list`)"
            ))
            .into());
        }
        self.agents
            .resume(ResumeAgentOptions {
                id: id.to_owned(),
                options: self.options(),
                owner: None,
            })
            .await
            .map_err(|e| anyhow!("resuming session `{id}`: {e}"))
    }

    /// Stored session headers, newest first.
    ///
    /// # Errors
    /// Storage errors.
    pub fn stored_headers(&self) -> Result<Vec<SessionHeader>> {
        let storage: Arc<dyn SessionPersistence> =
            match self.kernel.root().get::<PersistenceService>() {
                Some(p) => p.backend.clone(),
                None => storage(&self.config)?,
            };
        let mut list = storage
            .list()
            .map_err(|e| anyhow!("listing sessions: {e}"))?;
        list.sort_by_key(|h| std::cmp::Reverse(h.created_at));
        Ok(list)
    }

    /// The newest stored session of this workspace (`--continue`, `resume --last`).
    ///
    /// # Errors
    /// [`UsageError`] when there is none.
    pub fn last_session_id(&self) -> Result<String> {
        let cwd = self.config.cwd.display().to_string();
        self.stored_headers()?
            .into_iter()
            .find(|h| h.cwd.as_deref() == Some(cwd.as_str()))
            .map(|h| h.id)
            .ok_or_else(|| UsageError(format!("no stored session for {cwd}")).into())
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

    /// Drains every agent and tears the kernel down.
    pub async fn shutdown(self) {
        self.agents.dispose_all().await;
        self.kernel.dispose().await;
    }
}
