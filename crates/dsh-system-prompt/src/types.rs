//! The system-prompt vocabulary: registry inputs ([`PromptSection`], [`PromptContext`], variable
//! and tool providers), the per-assembly [`AssembleContext`], the [`PromptAssembly`] output and
//! the two events (`system-prompt/assemble`, `system-prompt/change`).
//!
//! See docs/upstream/system-prompt.md (Types).

use std::collections::BTreeMap;
use std::sync::Arc;

use dsh_kernel::{BoxError, CancellationToken, Context, ScopeKey};
use dsh_llm::ToolSchema;
use serde::{Deserialize, Serialize};

/// The per-assembly context handed to text, variable and tool providers and to
/// `system-prompt/assemble` listeners.
#[derive(Clone, Debug, Default)]
pub struct AssembleContext {
    /// The scope whose registrations and scope-filtered listeners participate (an agent's key).
    /// `None`: only global registrations and unfiltered listeners.
    pub scope: Option<ScopeKey>,
    /// The agent scope's context, when the loop assembles for an agent.
    pub agent: Option<Context>,
    /// The requesting turn's cancellation token (controls only this assembly).
    pub cancellation: Option<CancellationToken>,
}

impl AssembleContext {
    /// A context for `scope` without an agent context or cancellation.
    pub fn for_scope(scope: Option<ScopeKey>) -> Self {
        Self {
            scope,
            agent: None,
            cancellation: None,
        }
    }
}

/// A dynamic text provider, evaluated at each assembly.
pub type TextFn = Arc<dyn Fn(&AssembleContext) -> String + Send + Sync>;

/// A variable provider; `None` means "registered but no value for this assembly" (rendering a
/// reference to it fails with `PROMPT_VARIABLE_UNSET`).
pub type VariableFn = Arc<dyn Fn(&AssembleContext) -> Option<String> + Send + Sync>;

/// A tool-schema provider, evaluated at each assembly.
pub type ToolProviderFn = Arc<dyn Fn(&AssembleContext) -> ToolProviderResult + Send + Sync>;

/// Static text or a provider evaluated per assembly. Texts may contain `{{variable}}`
/// references, interpolated later by [`crate::render_prompt`].
#[derive(Clone)]
pub enum PromptText {
    /// Fixed text.
    Static(String),
    /// Text computed from the assembly context.
    Dynamic(TextFn),
}

impl PromptText {
    /// A dynamic text.
    pub fn dynamic(f: impl Fn(&AssembleContext) -> String + Send + Sync + 'static) -> Self {
        Self::Dynamic(Arc::new(f))
    }

    /// The text for one assembly.
    pub fn resolve(&self, cx: &AssembleContext) -> String {
        match self {
            Self::Static(s) => s.clone(),
            Self::Dynamic(f) => f(cx),
        }
    }
}

impl std::fmt::Debug for PromptText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Static(s) => f.debug_tuple("Static").field(s).finish(),
            Self::Dynamic(_) => f.write_str("Dynamic(..)"),
        }
    }
}

impl From<&str> for PromptText {
    fn from(s: &str) -> Self {
        Self::Static(s.to_owned())
    }
}

impl From<String> for PromptText {
    fn from(s: String) -> Self {
        Self::Static(s)
    }
}

/// One contributed section of the system prompt.
///
/// Order convention: −100 harness identity, 0 deployment persona, 100–199 tool guidance.
#[derive(Clone, Debug)]
pub struct PromptSection {
    /// Unique per layer (global, or one agent scope); a scoped section shadows a global one of
    /// the same name.
    pub name: String,
    /// Ascending concatenation order; must be finite.
    pub order: f64,
    /// The text (may reference `{{variables}}`).
    pub text: PromptText,
    /// This section is the complete system prompt: after the assemble waterfall it becomes the
    /// only section. More than one effective complete section fails assembly.
    pub complete: bool,
}

impl PromptSection {
    /// A non-complete section.
    pub fn new(name: impl Into<String>, order: f64, text: impl Into<PromptText>) -> Self {
        Self {
            name: name.into(),
            order,
            text: text.into(),
            complete: false,
        }
    }

    /// Marks the section complete.
    pub fn complete(mut self) -> Self {
        self.complete = true;
        self
    }
}

/// Dynamic runtime context: not part of the system prompt; rendered into a user-role snapshot
/// message when it changes (see [`crate::snapshot_message`]). Empty text contributes nothing.
#[derive(Clone, Debug)]
pub struct PromptContext {
    /// Unique per layer; scoped shadows global.
    pub name: String,
    /// Ascending join order; must be finite.
    pub order: f64,
    /// The text (may reference `{{variables}}`).
    pub text: PromptText,
}

impl PromptContext {
    /// A context.
    pub fn new(name: impl Into<String>, order: f64, text: impl Into<PromptText>) -> Self {
        Self {
            name: name.into(),
            order,
            text: text.into(),
        }
    }
}

/// What a tool provider contributes to one assembly.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolProviderResult {
    /// The schemas visible in this assembly.
    pub schemas: Vec<ToolSchema>,
    /// The pre-restriction name universe used to validate `tool_order` (default: the schemas'
    /// names).
    pub known_names: Option<Vec<String>>,
}

/// One resolved (not yet interpolated) section or context: `{name, text}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AssembledSection {
    /// The contributing entry's name.
    pub name: String,
    /// Its resolved text, before `{{variable}}` interpolation.
    pub text: String,
}

impl AssembledSection {
    /// A section.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            text: text.into(),
        }
    }
}

/// The assembled model input of one step: sections and contexts (sorted by order,
/// uninterpolated), tools (canonical order), and variable values (`None` = no value).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PromptAssembly {
    /// System-prompt sections, ascending order.
    pub sections: Vec<AssembledSection>,
    /// Runtime contexts, ascending order (empty when suppressed).
    pub contexts: Vec<AssembledSection>,
    /// Tool schemas from tool providers, in `tool_order` / lexicographic order.
    pub tools: Vec<ToolSchema>,
    /// Variable values by name.
    pub variables: BTreeMap<String, Option<String>>,
}

/// Payload of `system-prompt/assemble`: the assembly built from registrations and the
/// caller's context.
#[derive(Clone, Debug)]
pub struct AssembleRequest {
    /// The assembly so far (listeners may replace it before or after `next`).
    pub assembly: PromptAssembly,
    /// The caller's context.
    pub context: AssembleContext,
}

dsh_kernel::event! {
    /// `system-prompt/assemble` (waterfall, scope-filtered by the assembly's scope): expert
    /// middleware over the assembly; the returned value is authoritative (except that a
    /// complete section and runtime-context suppression are re-applied afterwards). The
    /// terminal returns the payload's assembly. An `Err` fails the assembly
    /// (`ASSEMBLE_LISTENER_FAILED`).
    pub struct SystemPromptAssemble: waterfall("system-prompt/assemble") => AssembleRequest, Result<PromptAssembly, BoxError>;
}

dsh_kernel::event! {
    /// `system-prompt/change` (emit, unfiltered): any registration was added or removed.
    pub struct SystemPromptChange: emit("system-prompt/change") => ();
}
