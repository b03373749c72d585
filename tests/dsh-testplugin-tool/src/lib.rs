//! The sample tool plugin of `docs/tools.md` ("Authoring a tool"): `word_count` counts the
//! whitespace-separated words of a text. The whole plugin — arguments, tool, effects and
//! registration — is this file: 21 non-blank, non-comment lines (checked by the crate's test).

use dsh_tools::{Tool, ToolEffects, ToolFailure, ToolRunContext};

/// Arguments of `word_count`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct Args {
    /// The text whose words are counted.
    pub text: String,
}

/// The `word_count` tool: read-only, parallel-safe; its value is the word count.
pub struct WordCount;

impl Tool for WordCount {
    const NAME: &'static str = "word_count";
    type Args = Args;
    type Output = u64;
    fn description(&self) -> String {
        "Count the whitespace-separated words of a text.".into()
    }
    fn effects(&self) -> ToolEffects {
        ToolEffects::READ_ONLY.parallel_safe()
    }
    async fn call(&self, args: Args, _cx: ToolRunContext) -> Result<u64, ToolFailure> {
        Ok(args.text.split_whitespace().count() as u64)
    }
}

dsh_tools::tool_plugin!(WordCount);
