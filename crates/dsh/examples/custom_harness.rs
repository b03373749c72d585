//! A minimal custom harness: the dsh command line over a plugin set of its own — the kernel's
//! core seams, the agent loop, the DeepSeek/OpenAI-compatible provider, the filesystem tools and
//! the permission presets that guard them, and nothing else (no shell, no search, no todo list,
//! no persistence: run `exec` with `--ephemeral`).
//!
//! Leave `dsh-permissions` out only knowingly: it is what enforces `--permission-mode`
//! (`read-only` denies `write` and `edit`); without it every tool call runs, fenced only by the
//! filesystem tools' workspace boundary.
//!
//! ```sh
//! cargo run -p dsh --example custom_harness -- plugins
//! DEEPSEEK_API_KEY=sk-... cargo run -p dsh --example custom_harness -- exec --ephemeral "list the files"
//! ```
//!
//! Assembling a harness is this file: one `preset!` naming the plugins (which also links their
//! crates) and `dsh::main_with`. `crates/dsh/tests/custom_harness.rs` pins the set.

use std::process::ExitCode;

dsh_kernel::preset! {
    /// The plugins of this harness.
    static CUSTOM = [
        dsh_agent::PLUGIN,
        dsh_agent_loop::PLUGIN,
        dsh_approval::PLUGIN,
        dsh_llm::PLUGIN,
        dsh_llm_deepseek::PLUGIN,
        dsh_permissions::PLUGIN,
        dsh_session::PLUGIN,
        dsh_system_prompt::PLUGIN,
        dsh_tool_fs::PLUGIN,
        dsh_tools::PLUGIN,
    ]
}

fn main() -> ExitCode {
    dsh::main_with(&dsh::Harness {
        plugins: CUSTOM,
        defaults: "provider = \"deepseek\"\nmodel = \"deepseek-v4-flash\"\n",
    })
}
