//! `dsh mcp list`: the configured MCP servers, their state and tools.
//!
//! Boots the harness like a session would (the servers start, and the command waits for each
//! up to its `startup_timeout_ms`), prints one line per server, then shuts the servers down.
//! Behaviour of the client: docs/upstream/mcp.md.

use anyhow::Result;
use clap::Subcommand;
use serde_json::json;

use crate::app::App;

/// `dsh mcp …`.
#[derive(Subcommand, Debug)]
pub enum McpCommand {
    /// Start the configured MCP servers, wait for them (each up to its startup_timeout_ms) and
    /// print each one's name, transport, state and tools.
    List {
        /// One JSON array of `{name, transport, state, error?, tools: [{name, mcpName}]}`.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `cmd` on a booted `app`; exit code 0.
pub async fn run(app: App, cmd: McpCommand) -> Result<i32> {
    let McpCommand::List { json } = cmd;
    let service = app.kernel.root().get::<dsh_mcp::McpService>();
    let mut rows = Vec::new();
    if let Some(service) = &service {
        service.wait_started().await;
        for s in service.servers() {
            let status = s.status();
            let error = match &status {
                dsh_mcp::ServerStatus::Failed(why) | dsh_mcp::ServerStatus::Reconnecting(why) => {
                    Some(why.clone())
                }
                _ => None,
            };
            rows.push((
                s.name.clone(),
                s.transport.as_str(),
                status.label(),
                error,
                s.tools(),
            ));
        }
    }
    let mut out = String::new();
    if json {
        let list: Vec<_> = rows
            .iter()
            .map(|(name, transport, state, error, tools)| {
                let mut v = json!({
                    "name": name,
                    "transport": transport,
                    "state": state,
                    "tools": tools.iter().map(|t| json!({"name": t.name, "mcpName": t.raw})).collect::<Vec<_>>(),
                });
                if let Some(e) = error {
                    v["error"] = json!(e);
                }
                v
            })
            .collect();
        out.push_str(&serde_json::to_string(&list)?);
        out.push('\n');
    } else if rows.is_empty() {
        out.push_str(
            "no MCP servers configured ([mcp_servers.<name>] in $DSH_HOME/settings.toml)\n",
        );
    } else {
        for (name, transport, state, error, tools) in &rows {
            out.push_str(&format!(
                "{name}\t{transport}\t{state}\t{} tools\n",
                tools.len()
            ));
            for t in tools {
                out.push_str(&format!("  {}\n", t.name));
            }
            if let Some(e) = error {
                for line in e.lines() {
                    out.push_str(&format!("  ! {line}\n"));
                }
            }
        }
    }
    crate::cli::out(out.trim_end_matches('\n'))?;
    app.shutdown().await;
    Ok(0)
}
