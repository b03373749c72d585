//! Dev-only test support for dsh: a scripted replay provider that speaks the OpenAI / DeepSeek
//! chat-completions wire format over real HTTP on `127.0.0.1`, and records every request so
//! tests can assert exactly what a client sent. Use it only as a `[dev-dependency]` (and through
//! the `dsh-replay-server` binary in end-to-end tests).
//!
//! See docs/upstream/llm.md (Stream chunks) and docs/upstream/deepseek.md (the wire shapes).
//!
//! # Routes
//! * `POST /chat/completions` and `POST /v1/chat/completions`: the next scripted response.
//! * `POST /v1/messages` and `POST /messages`: the next scripted response in the Anthropic
//!   Messages format (Anthropic mode): raw `sse` and JSON bodies are served unchanged, a
//!   synthesized response becomes Anthropic events ([`synthesize_anthropic_sse`]: a `thinking`
//!   block with a signature, a `text` block, `tool_use` blocks). The two modes share one script
//!   and one response counter.
//! * `GET /models` and `GET /v1/models`: `{"object":"list","data":[{"id",…}]}` built from the
//!   script's `models` list (default `deepseek-v4-flash`, `deepseek-v4-pro`).
//!
//! Every request (method, path, lower-cased headers, body parsed as JSON or kept as a JSON
//! string) is recorded in arrival order, see [`ReplayServer::requests`].
//!
//! # Script format
//! A script is a JSON list of responses, or an object `{"responses":[…],"models":["id",…]}`.
//! Each response is one object of one of three shapes:
//!
//! * `{"sse": "<raw body>"}` — the raw SSE body, served byte-exact with status 200 and
//!   `content-type: text/event-stream`. For pacing it is cut into frames after every `"\n\n"`
//!   (the concatenation is the original bytes).
//! * `{"text": "…", "reasoning": "…", "tool_calls": [["name", "{\"raw\":\"json\"}"], …],
//!   "finish": "stop"}` — every field optional; synthesized as a DeepSeek-style stream: a role
//!   chunk, `reasoning_content` deltas, `content` deltas, then each tool call (first fragment
//!   carries `index`, `id` = `call_<NN>_replay<R>` (NN = call index, two digits; R = response
//!   number from 0), `type`, `function.name`, `arguments:""`; the arguments follow in pieces),
//!   all split into pieces of at most 8 characters, then a final chunk with `finish_reason`
//!   (default `tool_calls` when there are tool calls, else `stop`) and `usage`
//!   (`prompt_tokens` 100 = 0 cache hit + 100 miss; `completion_tokens` = emitted characters / 4,
//!   at least 1), then `data: [DONE]`. A tool call's arguments may also be given as a JSON
//!   value (serialized compactly). A `"usage"` object replaces the synthesized usage.
//! * `{"status": N, "body": {…}, "headers": {"name": "value"}}` — a plain HTTP response with
//!   JSON body `body` (when `body` is a string it is sent verbatim). `headers` also applies to
//!   the two SSE shapes, and `status` may be set on them too (default 200).
//!
//! Optional on every shape: `"delay_ms": N` — wait N ms before each frame (and before a JSON
//! body); `"disconnect_after": N` — send only the first N frames, wait `delay_ms` (default 20 ms)
//! so they reach the socket, then abort the connection
//! (the chunked body is never terminated, so the client sees a broken body).
//!
//! Responses are served in order (a request past the end gets a 500 with
//! `error.type = "replay_exhausted"`). In *stateless* mode ([`ReplayOptions::stateless`]) the
//! response index is the number of `role:"assistant"` messages in the request body instead, so
//! a resumed client gets the answer that fits its history (both formats call the model's role
//! `assistant`).
//!
//! # Binary
//! `dsh-replay-server SCRIPT.json [--port N] [--stateless] [--log FILE]` binds `127.0.0.1`
//! (port 0 = random by default), prints `http://127.0.0.1:<port>` as the first stdout line, and
//! serves until killed; with `--log` each recorded request is appended to FILE as one JSON line.

mod replay;
mod script;

pub use replay::{RecordedRequest, ReplayOptions, ReplayServer};
pub use script::{Script, ScriptResponse, synthesize_anthropic_sse, synthesize_sse};

/// Errors of the replay provider. Codes ([`dsh_kernel::ErrorCode`]) are stable SCREAMING_SNAKE
/// strings.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum TestSupportError {
    /// The script is not valid JSON or has a response of no known shape. Code `INVALID_SCRIPT`.
    #[error("invalid replay script: {0}")]
    #[code("INVALID_SCRIPT")]
    InvalidScript(String),
    /// Binding or serving the socket failed. Code `IO`.
    #[error("replay server I/O failed: {0}")]
    #[code("IO")]
    Io(#[from] std::io::Error),
}
