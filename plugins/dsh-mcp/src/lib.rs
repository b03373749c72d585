//! dsh-mcp: the MCP client.
//!
//! Each configured server (`[mcp_servers.<name>]`, and with `[mcp] import_project = true` the
//! project's `.mcp.json`) is started when the plugin starts, over stdio (a child process, with
//! credential-looking variables withheld unless listed in `env_vars`) or streamable HTTP, on
//! the official Rust SDK (`rmcp`). Its tools become dsh tools named `mcp__<server>__<tool>`
//! ([`naming::tool_name`]); `notifications/tools/list_changed` re-syncs them; each call carries
//! the tool call's cancel signal and the server's `tool_timeout_ms`; a lost connection is
//! reported on stderr and re-established with backoff ([`server::McpServer::run`]).
//!
//! Before an agent's first step the session waits for every server to answer `initialize`, up
//! to its `startup_timeout_ms`; a server that fails is reported on stderr with its name and the
//! tail of its stderr, and the session starts without its tools.
//!
//! MCP servers are the user's own programs: they run outside dsh's permission presets and any
//! OS sandbox, like an editor's plugins. The settings that start them (`mcp_servers`,
//! `import_project`) are restricted: a project's own `.dsh/settings.toml` may not set them.
//!
//! Behaviour and its upstream source: docs/upstream/mcp.md.

pub mod config;
mod error;
pub mod naming;
pub mod render;
pub mod schema;
pub mod server;
pub mod tool;

use std::path::PathBuf;
use std::sync::Arc;

use dsh_agent::AgentPreStep;
use dsh_kernel::{BoxError, Context};
use dsh_tools::ToolRegistry;

pub use config::{McpConfig, ServerConfig, Transport, is_valid_server_name, project_servers};
pub use error::McpError;
pub use server::{McpServer, RegisteredTool, ServerStatus};

/// The plugin id and settings section name.
pub const PLUGIN_ID: &str = "dsh-mcp";

/// The servers of this run (a kernel service: `ctx.get::<McpService>()`).
#[derive(Debug, Default)]
pub struct McpService {
    servers: Vec<Arc<McpServer>>,
}

impl McpService {
    /// The servers, by name.
    pub fn servers(&self) -> &[Arc<McpServer>] {
        &self.servers
    }

    /// Waits until every server answered `initialize`, failed, or passed its
    /// `startup_timeout_ms`.
    pub async fn wait_started(&self) {
        futures::future::join_all(self.servers.iter().map(|s| s.wait_started())).await;
    }
}

/// The servers to run: the settings' (enabled ones) plus, with `import_project`, those of
/// `<workspace>/.mcp.json` not named in the settings. A bad `.mcp.json` is warned about and
/// skipped.
///
/// # Errors
/// [`McpError::Config`]: an invalid server name, or neither / both of `command` and `url`.
pub fn resolve_servers(
    config: &McpConfig,
    workspace: Option<&std::path::Path>,
) -> Result<Vec<(String, ServerConfig, Transport)>, McpError> {
    let mut all = config.mcp_servers.clone();
    if config.import_project
        && let Some(root) = workspace
    {
        match project_servers(root) {
            Ok(found) => {
                for (name, s) in found {
                    all.entry(name).or_insert(s);
                }
            }
            Err(e) => tracing::warn!(target: "dsh_mcp", "skipping .mcp.json: {e}"),
        }
    }
    let mut out = Vec::new();
    for (name, s) in all {
        if !is_valid_server_name(&name) {
            return Err(McpError::Config(format!(
                "mcp_servers.{name}: a server name is 1 to 32 letters, digits, `_` or `-`"
            )));
        }
        if !s.enabled {
            continue;
        }
        let t = s.transport(&name)?;
        out.push((name, s, t));
    }
    Ok(out)
}

fn start(ctx: &Context) -> Result<(), BoxError> {
    let config: McpConfig = ctx.settings_section(PLUGIN_ID)?;
    let settings = ctx.settings();
    let workspace = settings.fact_str("workspace").map(PathBuf::from);
    let resolved = resolve_servers(&config, workspace.as_deref())?;
    let registry = ctx
        .get::<ToolRegistry>()
        .ok_or("dsh-mcp needs the ToolRegistry service (link dsh-tools)")?;
    let mut servers = Vec::new();
    if !resolved.is_empty() && tokio::runtime::Handle::try_current().is_err() {
        return Err("dsh-mcp starts its servers on the tokio runtime; boot it inside one".into());
    }
    for (name, s, t) in resolved {
        let server = McpServer::new(name, s, t, workspace.clone(), ctx.clone(), registry.clone());
        ctx.spawn("mcp server", server.clone().run(ctx.cancellation()))?
            .detach();
        servers.push(server);
    }
    let service = Arc::new(McpService { servers });
    ctx.provide(service.clone())?.detach();
    if !service.servers.is_empty() {
        ctx.on_waterfall::<AgentPreStep, _, _>(move |p, next| {
            let service = service.clone();
            async move {
                service.wait_started().await;
                next.run(p).await
            }
        })?
        .detach();
    }
    Ok(())
}

dsh_kernel::plugin! {
    after = [dsh_tools::PLUGIN, dsh_agent::PLUGIN],
    settings = McpConfig,
    aliases = ["mcp"],
    top_level = ["mcp_servers"],
    restricted = ["mcp_servers", "import_project"],
    start = start,
}
