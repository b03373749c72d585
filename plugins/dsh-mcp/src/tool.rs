//! One MCP tool as a dsh tool (a dynamic [`ToolDefinition`]). See docs/upstream/mcp.md
//! ("Calls").

use std::sync::Weak;
use std::time::Duration;

use dsh_llm::ToolSchema;
use dsh_tools::{ToolDefinition, ToolEffects, ToolFailure, ToolOutput, ToolRunContext};
use futures::future::BoxFuture;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::render::content_text;
use crate::server::McpServer;

/// `mcp__<server>__<tool>`: calls `tools/call {name: <tool>, arguments}` on its server with the
/// call's cancel signal and the server's `tool_timeout_ms`.
pub struct McpTool {
    server: Weak<McpServer>,
    raw: String,
    schema: ToolSchema,
    read_only: bool,
    timeout: Duration,
}

impl McpTool {
    /// A tool of `server` named `name` for the model and `raw` for the server.
    pub fn new(
        server: Weak<McpServer>,
        name: String,
        raw: String,
        description: String,
        parameters: Value,
        read_only: bool,
        timeout: Duration,
    ) -> Self {
        Self {
            server,
            raw,
            schema: ToolSchema {
                name,
                description,
                parameters,
            },
            read_only,
            timeout,
        }
    }
}

impl ToolDefinition for McpTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    /// Read-only when the server marks the tool `readOnlyHint`; otherwise undeclared (not
    /// read-only: `--permission-mode read-only` denies it, `workspace-write` allows it).
    fn effects(&self) -> ToolEffects {
        if self.read_only {
            ToolEffects::READ_ONLY
        } else {
            ToolEffects::UNDECLARED
        }
    }

    fn render(
        &self,
        _args: &Value,
        value: &Value,
    ) -> Result<Vec<dsh_llm::ContentBlock>, ToolFailure> {
        let content = value
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        Ok(vec![dsh_llm::ContentBlock::text(content_text(&content))])
    }

    fn execute(
        &self,
        args: &Value,
        cx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolFailure>> {
        let server = self.server.clone();
        let raw = self.raw.clone();
        let timeout = self.timeout;
        let args = args.clone();
        Box::pin(async move {
            let Some(server) = server.upgrade() else {
                return Err(ToolFailure::message("the MCP client has shut down"));
            };
            let deadline = tokio::time::Instant::now() + timeout;
            let peer = tokio::select! {
                p = server.peer_within(timeout) => p.map_err(|e| ToolFailure::message(e.to_string()))?,
                () = cx.signal.cancelled() => return Err(ToolFailure::message("cancelled")),
            };
            let mut params = CallToolRequestParams::new(raw.clone());
            if let Value::Object(map) = args {
                params = params.with_arguments(map);
            }
            let result = tokio::select! {
                r = tokio::time::timeout_at(deadline, peer.call_tool(params)) => match r {
                    Ok(Ok(r)) => r,
                    Ok(Err(e)) => return Err(ToolFailure::message(format!(
                        "MCP server \"{}\": tools/call {raw:?} failed: {e}", server.name
                    ))),
                    Err(_) => return Err(ToolFailure::message(format!(
                        "MCP server \"{}\" did not answer tools/call {raw:?} within {} ms",
                        server.name,
                        timeout.as_millis()
                    ))),
                },
                () = cx.signal.cancelled() => return Err(ToolFailure::message("cancelled")),
            };
            let value = serde_json::to_value(&result).unwrap_or_default();
            let content = value
                .get("content")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if value.get("isError").and_then(Value::as_bool) == Some(true) {
                return Err(ToolFailure::message(content_text(&content)));
            }
            let mut out = json!({"content": content});
            if let Some(s) = value.get("structuredContent") {
                out["structuredContent"] = s.clone();
            }
            Ok(ToolOutput::value(out))
        })
    }

    fn is_concurrency_safe(&self, _args: &Value) -> bool {
        self.read_only
    }
}
