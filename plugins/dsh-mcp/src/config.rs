//! Settings: `[mcp]` and `[mcp_servers.<name>]` (Codex's keys), and the project's `.mcp.json`
//! (Claude Code's `mcpServers`). See docs/upstream/mcp.md ("Configuration").

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::McpError;

/// Default `startup_timeout_ms`: how long the first request waits for a server.
pub const DEFAULT_STARTUP_TIMEOUT_MS: u64 = 10_000;
/// Default `tool_timeout_ms`: the longest one `tools/call` may take.
pub const DEFAULT_TOOL_TIMEOUT_MS: u64 = 60_000;

fn default_startup() -> u64 {
    DEFAULT_STARTUP_TIMEOUT_MS
}
fn default_tool() -> u64 {
    DEFAULT_TOOL_TIMEOUT_MS
}
fn default_true() -> bool {
    true
}

/// Settings of the plugin: `[mcp]` (`import_project`) and the top-level `[mcp_servers]` table.
/// Both keys are restricted: a project's own `.dsh/settings.toml` may not start programs.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Also read the project's `.mcp.json` (`{"mcpServers": {…}}`, Claude Code's file); a
    /// server named in both is taken from the settings.
    pub import_project: bool,
    /// The servers, by name (`[A-Za-z0-9_-]{1,32}`).
    pub mcp_servers: BTreeMap<String, ServerConfig>,
}

/// One server: `command` (stdio) or `url` (streamable HTTP).
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The program to start (stdio transport).
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for it (after the scrubbed environment).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names of credential-looking variables of dsh's own environment to pass on (by default
    /// every name containing KEY, TOKEN, SECRET, PASSWORD, PASSWD or CREDENTIAL, and every
    /// `DSH_*` name, is withheld).
    #[serde(default)]
    pub env_vars: Vec<String>,
    /// Its working directory (default: the workspace root; relative: against it).
    #[serde(default)]
    pub cwd: Option<String>,
    /// The endpoint (streamable HTTP transport).
    #[serde(default)]
    pub url: Option<String>,
    /// Extra HTTP headers (e.g. `Authorization`).
    #[serde(default)]
    pub http_headers: BTreeMap<String, String>,
    /// How long the session's first request waits for this server (ms, default 10,000).
    #[serde(default = "default_startup")]
    pub startup_timeout_ms: u64,
    /// The longest one tool call may take (ms, default 60,000).
    #[serde(default = "default_tool")]
    pub tool_timeout_ms: u64,
    /// `false` leaves the server out.
    #[serde(default = "default_true")]
    pub enabled: bool,
}

/// The transport a server uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC lines on stdin/stdout.
    Stdio,
    /// MCP streamable HTTP.
    Http,
}

impl Transport {
    /// `stdio` / `http`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdio => "stdio",
            Self::Http => "http",
        }
    }
}

impl ServerConfig {
    /// The transport, checked: exactly one of `command` and `url`.
    ///
    /// # Errors
    /// [`McpError::Config`] naming the server.
    pub fn transport(&self, name: &str) -> Result<Transport, McpError> {
        match (&self.command, &self.url) {
            (Some(_), None) => Ok(Transport::Stdio),
            (None, Some(u)) if u.starts_with("http://") || u.starts_with("https://") => {
                Ok(Transport::Http)
            }
            (None, Some(u)) => Err(McpError::Config(format!(
                "mcp_servers.{name}.url: {u:?} is not an http(s) URL"
            ))),
            (Some(_), Some(_)) => Err(McpError::Config(format!(
                "mcp_servers.{name}: set either `command` or `url`, not both"
            ))),
            (None, None) => Err(McpError::Config(format!(
                "mcp_servers.{name}: set `command` (stdio) or `url` (streamable HTTP)"
            ))),
        }
    }
}

/// Whether `name` is a valid server name (`[A-Za-z0-9_-]{1,32}`, upstream's rule).
pub fn is_valid_server_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// One server of `.mcp.json` (Claude Code's shape).
#[derive(Debug, Deserialize)]
struct ProjectServer {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct ProjectFile {
    #[serde(default, rename = "mcpServers")]
    mcp_servers: BTreeMap<String, ProjectServer>,
}

/// The servers of `<root>/.mcp.json` (none when the file is absent).
///
/// # Errors
/// [`McpError::Config`] when the file cannot be read or parsed, or names an `sse` server
/// (not supported: only stdio and streamable HTTP).
pub fn project_servers(root: &Path) -> Result<BTreeMap<String, ServerConfig>, McpError> {
    let path = root.join(".mcp.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(McpError::Config(format!("{}: {e}", path.display()))),
    };
    let file: ProjectFile = serde_json::from_str(&text)
        .map_err(|e| McpError::Config(format!("{}: {e}", path.display())))?;
    let mut out = BTreeMap::new();
    for (name, s) in file.mcp_servers {
        if s.kind.as_deref() == Some("sse") {
            return Err(McpError::Config(format!(
                "{}: server {name:?}: the legacy SSE transport is not supported (use streamable HTTP)",
                path.display()
            )));
        }
        out.insert(
            name,
            ServerConfig {
                command: s.command,
                args: s.args,
                env: s.env,
                env_vars: Vec::new(),
                cwd: None,
                url: s.url,
                http_headers: s.headers,
                startup_timeout_ms: DEFAULT_STARTUP_TIMEOUT_MS,
                tool_timeout_ms: DEFAULT_TOOL_TIMEOUT_MS,
                enabled: true,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_file_and_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".mcp.json"),
            r#"{"mcpServers":{"a":{"command":"x","args":["1"]},"b":{"type":"http","url":"http://127.0.0.1:1/mcp","headers":{"X":"y"}}}}"#,
        )
        .unwrap();
        let s = project_servers(dir.path()).unwrap();
        assert_eq!(s["a"].transport("a").unwrap(), Transport::Stdio);
        assert_eq!(s["a"].args, ["1"]);
        assert_eq!(s["b"].transport("b").unwrap(), Transport::Http);
        assert_eq!(s["b"].http_headers["X"], "y");
        assert!(is_valid_server_name("time_1-x"));
        assert!(!is_valid_server_name("a.b"));
        assert!(!is_valid_server_name(""));
    }
}
