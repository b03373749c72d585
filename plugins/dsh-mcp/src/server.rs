//! One configured server: its connection (stdio child or streamable HTTP), the stderr tail,
//! the status, the registered tools, `tools/list_changed` re-sync and reconnection with
//! backoff. See docs/upstream/mcp.md ("Lifecycle").

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use dsh_kernel::{Context, Registration};
use dsh_tools::{ToolDefinition, ToolRegistry};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::{ServerConfig, Transport};
use crate::tool::McpTool;
use crate::{McpError, naming, schema};

/// Lines of a stdio server's stderr kept for reports.
pub const STDERR_TAIL_LINES: usize = 20;
/// How much longer than `startup_timeout_ms` the session waits for a server's first attempt
/// to report its outcome (a guard; the attempt's own deadline is `startup_timeout_ms`).
pub const STARTUP_GRACE_MS: u64 = 1_000;
/// First reconnect delay (doubles per attempt).
pub const RECONNECT_INITIAL_MS: u64 = 500;
/// Longest reconnect delay; a connection that lived this long resets the budget.
pub const RECONNECT_MAX_MS: u64 = 30_000;
/// Reconnect attempts before the server is given up (its tools are then removed).
pub const RECONNECT_MAX_ATTEMPTS: u32 = 10;

/// What a server is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerStatus {
    /// Starting (before its first `initialize` answer).
    Starting,
    /// Connected; its tools are registered.
    Ready,
    /// The connection was lost; reconnecting (the text says why).
    Reconnecting(String),
    /// Not running (failed to start, or gave up reconnecting); the text says why.
    Failed(String),
}

impl ServerStatus {
    /// `starting` / `ready` / `reconnecting` / `failed`.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Reconnecting(_) => "reconnecting",
            Self::Failed(_) => "failed",
        }
    }
}

/// One tool as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredTool {
    /// The dsh tool name (`mcp__<server>__<tool>`).
    pub name: String,
    /// The server's own name for it.
    pub raw: String,
}

struct Inner {
    peer: Option<Peer<RoleClient>>,
    tools: Vec<RegisteredTool>,
    registrations: Vec<Registration>,
}

/// A configured server and its live connection.
pub struct McpServer {
    /// The server name.
    pub name: String,
    /// Its configuration.
    pub config: ServerConfig,
    /// Its transport.
    pub transport: Transport,
    workspace: Option<PathBuf>,
    ctx: Context,
    registry: Arc<ToolRegistry>,
    status: watch::Sender<ServerStatus>,
    inner: Mutex<Inner>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    started: Instant,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

/// The client side of one connection: re-syncs the tools on `tools/list_changed`.
struct Handler {
    server: Weak<McpServer>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let server = self.server.clone();
        async move {
            if let Some(server) = server.upgrade() {
                tracing::info!(target: "dsh_mcp", server = %server.name, "tools/list_changed: re-syncing");
                if let Err(e) = server.sync_tools(&context.peer).await {
                    tracing::warn!(target: "dsh_mcp", "MCP server \"{}\": re-sync after tools/list_changed failed, keeping the previous tools: {e}", server.name);
                }
            }
        }
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("dsh", env!("CARGO_PKG_VERSION")),
        )
    }
}

type Running = RunningService<RoleClient, Handler>;

/// A stdio server's process: killed with its whole process group when dropped (wrappers such
/// as `npx` or `uvx` start the real server as a grandchild).
pub struct ServerProcess {
    child: tokio::process::Child,
    pgid: Option<u32>,
}

impl ServerProcess {
    async fn wait(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .ok()?
            .ok()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            dsh_process::proc::signal_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

impl McpServer {
    /// A server not yet started.
    pub fn new(
        name: String,
        config: ServerConfig,
        transport: Transport,
        workspace: Option<PathBuf>,
        ctx: Context,
        registry: Arc<ToolRegistry>,
    ) -> Arc<Self> {
        Arc::new(Self {
            name,
            config,
            transport,
            workspace,
            ctx,
            registry,
            status: watch::channel(ServerStatus::Starting).0,
            inner: Mutex::new(Inner {
                peer: None,
                tools: Vec::new(),
                registrations: Vec::new(),
            }),
            stderr: Arc::new(Mutex::new(VecDeque::new())),
            started: Instant::now(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current status.
    pub fn status(&self) -> ServerStatus {
        self.status.borrow().clone()
    }

    fn set_status(&self, s: ServerStatus) {
        self.status.send_replace(s);
    }

    /// The tools registered now.
    pub fn tools(&self) -> Vec<RegisteredTool> {
        self.lock().tools.clone()
    }

    /// The last lines the server wrote to stderr, joined by `\n` (stdio only).
    pub fn stderr_tail(&self) -> String {
        let t = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        t.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    fn with_tail(&self, message: String) -> String {
        let tail = self.stderr_tail();
        if tail.is_empty() {
            message
        } else {
            format!("{message}; stderr:\n{tail}")
        }
    }

    /// Waits until the server has left `Starting`. The first connection attempt itself ends at
    /// `startup_timeout_ms` after the start (and then sets `Failed`), so this returns by then;
    /// [`STARTUP_GRACE_MS`] more is only a guard.
    pub async fn wait_started(&self) {
        let deadline =
            self.started + Duration::from_millis(self.config.startup_timeout_ms + STARTUP_GRACE_MS);
        let mut rx = self.status.subscribe();
        let _ = tokio::time::timeout_at(
            deadline.into(),
            rx.wait_for(|s| *s != ServerStatus::Starting),
        )
        .await;
    }

    /// The connected peer, waiting up to `within` while the server is starting or
    /// reconnecting.
    ///
    /// # Errors
    /// [`McpError::NotConnected`] with the status.
    pub async fn peer_within(&self, within: Duration) -> Result<Peer<RoleClient>, McpError> {
        let mut rx = self.status.subscribe();
        let _ = tokio::time::timeout(
            within,
            rx.wait_for(|s| matches!(s, ServerStatus::Ready | ServerStatus::Failed(_))),
        )
        .await;
        if let Some(p) = self.lock().peer.clone() {
            return Ok(p);
        }
        Err(McpError::NotConnected {
            server: self.name.clone(),
            status: match self.status() {
                ServerStatus::Failed(why) | ServerStatus::Reconnecting(why) => why,
                other => other.label().to_owned(),
            },
        })
    }

    fn read_stderr(&self, stderr: tokio::process::ChildStderr) {
        let tail = self.stderr.clone();
        let name = self.name.clone();
        let stop = self.ctx.cancellation();
        let _ = self.ctx.spawn("mcp stderr", async move {
            let mut lines = BufReader::new(stderr).lines();
            // A grandchild may keep the pipe open after the server is gone: stop with the
            // plugin scope too.
            while let Some(Ok(Some(line))) = tokio::select! {
                l = lines.next_line() => Some(l),
                () = stop.cancelled() => None,
            } {
                tracing::debug!(target: "dsh_mcp", server = %name, "stderr: {line}");
                let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
                if t.len() == STDERR_TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
    }

    /// The stdio child's environment: dsh's own minus credential-looking and `DSH_*` names
    /// (except those in `env_vars`), then `env`.
    pub fn child_env(&self) -> std::collections::BTreeMap<String, String> {
        let mut env = dsh_process::env::scrubbed_ambient();
        for name in &self.config.env_vars {
            if let Ok(v) = std::env::var(name) {
                env.insert(name.clone(), v);
            }
        }
        for (k, v) in &self.config.env {
            env.insert(k.clone(), v.clone());
        }
        env
    }

    async fn connect(self: &Arc<Self>) -> Result<(Running, Option<ServerProcess>), McpError> {
        let handler = Handler {
            server: Arc::downgrade(self),
        };
        // The first attempt's deadline counts from the server's start (what the session waits
        // for); a reconnect attempt gets the whole timeout again.
        let first = self.status() == ServerStatus::Starting;
        let startup = Duration::from_millis(self.config.startup_timeout_ms);
        let deadline = if first {
            tokio::time::Instant::from_std(self.started) + startup
        } else {
            tokio::time::Instant::now() + startup
        };
        let timed_out = || McpError::StartupTimeout {
            server: self.name.clone(),
            ms: self.config.startup_timeout_ms,
        };
        match self.transport {
            Transport::Stdio => {
                let program = self.config.command.clone().unwrap_or_default();
                let mut cmd = tokio::process::Command::new(&program);
                cmd.args(&self.config.args)
                    .env_clear()
                    .envs(self.child_env())
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .kill_on_drop(true)
                    .process_group(0);
                let cwd = match (&self.config.cwd, &self.workspace) {
                    (Some(c), Some(w)) => Some(w.join(c)),
                    (Some(c), None) => Some(PathBuf::from(c)),
                    (None, w) => w.clone(),
                };
                if let Some(cwd) = cwd {
                    cmd.current_dir(cwd);
                }
                let mut child = cmd.spawn().map_err(|e| McpError::Spawn {
                    server: self.name.clone(),
                    command: program.clone(),
                    message: e.to_string(),
                })?;
                let pgid = child.id();
                if let Some(err) = child.stderr.take() {
                    self.read_stderr(err);
                }
                let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                    return Err(McpError::Spawn {
                        server: self.name.clone(),
                        command: program,
                        message: "no stdio pipes".into(),
                    });
                };
                let running = tokio::time::timeout_at(deadline, handler.serve((stdout, stdin)))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| McpError::Initialize {
                        server: self.name.clone(),
                        message: e.to_string(),
                    })?;
                Ok((running, Some(ServerProcess { child, pgid })))
            }
            Transport::Http => {
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let url = self.config.url.clone().unwrap_or_default();
                let mut config = StreamableHttpClientTransportConfig::with_uri(url);
                let mut headers = std::collections::HashMap::new();
                for (k, v) in &self.config.http_headers {
                    let name = http::HeaderName::from_bytes(k.as_bytes()).map_err(|e| {
                        McpError::Config(format!("mcp_servers.{}.http_headers.{k}: {e}", self.name))
                    })?;
                    let value = http::HeaderValue::from_str(v).map_err(|e| {
                        McpError::Config(format!("mcp_servers.{}.http_headers.{k}: {e}", self.name))
                    })?;
                    headers.insert(name, value);
                }
                config = config.custom_headers(headers);
                let transport = StreamableHttpClientTransport::from_config(config);
                let running = tokio::time::timeout_at(deadline, handler.serve(transport))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| McpError::Initialize {
                        server: self.name.clone(),
                        message: e.to_string(),
                    })?;
                Ok((running, None))
            }
        }
    }

    /// Lists the server's tools (all pages) and replaces the registered generation; on any
    /// failure the previous generation stays.
    ///
    /// # Errors
    /// [`McpError::Protocol`] (the listing failed, or names a tool twice) or
    /// [`McpError::Register`].
    pub async fn sync_tools(self: &Arc<Self>, peer: &Peer<RoleClient>) -> Result<(), McpError> {
        let listed = peer
            .list_all_tools()
            .await
            .map_err(|e| McpError::Protocol {
                server: self.name.clone(),
                message: format!("tools/list: {e}"),
            })?;
        let mut seen = HashSet::new();
        let mut defs: Vec<(RegisteredTool, Arc<dyn ToolDefinition>)> = Vec::new();
        for t in listed {
            let raw = t.name.to_string();
            if !seen.insert(raw.clone()) {
                return Err(McpError::Protocol {
                    server: self.name.clone(),
                    message: format!("tools/list names {raw:?} twice"),
                });
            }
            let input = Value::Object((*t.input_schema).clone());
            let read_only = t
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false);
            let name = naming::tool_name(&self.name, &raw);
            let tool = McpTool::new(
                Arc::downgrade(self),
                name.clone(),
                raw.clone(),
                t.description.as_deref().unwrap_or("").to_owned(),
                schema::parameters(&input),
                read_only,
                Duration::from_millis(self.config.tool_timeout_ms),
            );
            defs.push((RegisteredTool { name, raw }, Arc::new(tool)));
        }
        let mut inner = self.lock();
        let old = std::mem::take(&mut inner.registrations);
        drop(old);
        let mut regs = Vec::new();
        for (_, def) in &defs {
            match self.registry.register(&self.ctx, def.clone()) {
                Ok(r) => regs.push(r),
                Err(e) => {
                    drop(regs);
                    inner.tools.clear();
                    return Err(McpError::Register {
                        server: self.name.clone(),
                        message: e.to_string(),
                    });
                }
            }
        }
        inner.registrations = regs;
        inner.tools = defs.into_iter().map(|(t, _)| t).collect();
        Ok(())
    }

    fn unregister(&self) {
        let mut inner = self.lock();
        inner.registrations.clear();
        inner.tools.clear();
        inner.peer = None;
    }

    /// Connects, then keeps the connection: on loss, reports it and reconnects with backoff
    /// ([`RECONNECT_INITIAL_MS`] doubling to [`RECONNECT_MAX_MS`], at most
    /// [`RECONNECT_MAX_ATTEMPTS`] in a row). A server that fails its first start is reported and
    /// not retried. Ends when `stop` fires.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut attempts: u32 = 0;
        let mut delay = RECONNECT_INITIAL_MS;
        let mut ever_connected = false;
        loop {
            let connected = tokio::select! {
                r = self.connect() => r,
                () = stop.cancelled() => return,
            };
            match connected {
                Ok((running, child)) => {
                    let peer = running.peer().clone();
                    if let Err(e) = self.sync_tools(&peer).await {
                        tracing::warn!(target: "dsh_mcp", "MCP server \"{}\": {e}", self.name);
                    }
                    self.lock().peer = Some(peer);
                    if ever_connected {
                        tracing::warn!(target: "dsh_mcp", "MCP server \"{}\" reconnected", self.name);
                    }
                    ever_connected = true;
                    self.set_status(ServerStatus::Ready);
                    let since = Instant::now();
                    let ended = tokio::select! {
                        r = running.waiting() => Some(r),
                        () = stop.cancelled() => None,
                    };
                    let Some(ended) = ended else {
                        return;
                    };
                    let exit = match child {
                        Some(mut c) => match c.wait(Duration::from_millis(500)).await {
                            Some(status) => format!("exited with {status}"),
                            None => "closed its connection".to_owned(),
                        },
                        None => format!("connection closed ({ended:?})"),
                    };
                    self.lock().peer = None;
                    if since.elapsed() >= Duration::from_millis(RECONNECT_MAX_MS) {
                        attempts = 0;
                        delay = RECONNECT_INITIAL_MS;
                    }
                    let why = format!("MCP server \"{}\" {exit}", self.name);
                    tracing::warn!(target: "dsh_mcp", "{}; reconnecting", self.with_tail(why.clone()));
                    self.set_status(ServerStatus::Reconnecting(why));
                }
                Err(e) if !ever_connected => {
                    let why = self
                        .with_tail(format!("MCP server \"{}\" failed to start: {e}", self.name));
                    tracing::warn!(target: "dsh_mcp", "{why}");
                    self.unregister();
                    self.set_status(ServerStatus::Failed(why));
                    return;
                }
                Err(e) => {
                    tracing::warn!(target: "dsh_mcp", "MCP server \"{}\": reconnect attempt {attempts} failed: {e}", self.name);
                }
            }
            attempts += 1;
            if attempts > RECONNECT_MAX_ATTEMPTS {
                let why = format!(
                    "MCP server \"{}\" gave up after {RECONNECT_MAX_ATTEMPTS} reconnect attempts",
                    self.name
                );
                tracing::warn!(target: "dsh_mcp", "{why}");
                self.unregister();
                self.set_status(ServerStatus::Failed(why));
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(delay)) => {}
                () = stop.cancelled() => return,
            }
            delay = (delay * 2).min(RECONNECT_MAX_MS);
        }
    }
}
