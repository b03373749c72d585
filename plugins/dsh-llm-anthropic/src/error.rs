//! This crate's errors outside a call (configuration, client construction).

/// Errors of `dsh-llm-anthropic` outside a call, each with a stable code
/// ([`dsh_kernel::ErrorCode`]).
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum AnthropicError {
    /// The routes are invalid (an empty base URL, a 0 timeout, an id claimed twice). Code
    /// `INVALID_SETTINGS`.
    #[error("invalid dsh-llm-anthropic settings: {0}")]
    #[code("INVALID_SETTINGS")]
    InvalidSettings(String),
    /// A route's `base_url` is not an absolute `http://` / `https://` URL with a host and no
    /// query (from `[providers.<id>] base_url` or, for `anthropic`, `ANTHROPIC_BASE_URL`). A
    /// configuration error (exit 2 in `dsh`). Code `INVALID_BASE_URL`.
    #[error(
        "provider route {route:?} has an invalid base_url {url:?}: {reason} (set it with \
         [providers.{route}] base_url{env}; it is the part before /v1/messages, e.g. \
         https://api.anthropic.com or https://api.deepseek.com/anthropic)",
        env = if route == crate::ANTHROPIC_ROUTE { " or ANTHROPIC_BASE_URL" } else { "" }
    )]
    #[code("INVALID_BASE_URL")]
    InvalidBaseUrl {
        /// The route id.
        route: String,
        /// The URL as configured, its user info redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be built. Code `HTTP_CLIENT`.
    #[error("cannot build the HTTP client: {0}")]
    #[code("HTTP_CLIENT")]
    Client(String),
}
