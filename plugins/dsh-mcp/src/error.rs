//! The crate's typed errors.

/// Errors of the MCP client.
#[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
pub enum McpError {
    /// A configuration mistake (the text names the key).
    #[error("{0}")]
    #[code("MCP_CONFIG")]
    Config(String),
    /// The stdio program could not be started.
    #[error("cannot start {command:?}: {message}")]
    #[code("MCP_SPAWN")]
    Spawn {
        /// The server.
        server: String,
        /// The program.
        command: String,
        /// The OS error.
        message: String,
    },
    /// No `initialize` answer within `startup_timeout_ms`.
    #[error("no answer to initialize within {ms} ms")]
    #[code("MCP_STARTUP_TIMEOUT")]
    StartupTimeout {
        /// The server.
        server: String,
        /// The timeout.
        ms: u64,
    },
    /// `initialize` failed.
    #[error("initialize failed: {message}")]
    #[code("MCP_INITIALIZE")]
    Initialize {
        /// The server.
        server: String,
        /// The SDK's error.
        message: String,
    },
    /// A protocol-level failure after `initialize`.
    #[error("{message}")]
    #[code("MCP_PROTOCOL")]
    Protocol {
        /// The server.
        server: String,
        /// What failed.
        message: String,
    },
    /// A tool could not be registered (e.g. a name taken by another tool).
    #[error("registering its tools failed: {message}")]
    #[code("MCP_REGISTER")]
    Register {
        /// The server.
        server: String,
        /// The registry's error.
        message: String,
    },
    /// A call reached a server that is not connected.
    #[error("MCP server \"{server}\" is not connected ({status})")]
    #[code("MCP_NOT_CONNECTED")]
    NotConnected {
        /// The server.
        server: String,
        /// Its status text.
        status: String,
    },
}
