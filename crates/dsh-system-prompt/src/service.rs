//! The [`SystemPrompt`] kernel service: layered registrations (global + per agent scope) and
//! [`SystemPrompt::assemble`].
//!
//! See docs/upstream/system-prompt.md (Behaviour). Each registration goes into the layer
//! of the registering [`Context`]'s scope key (`None` ⇒ global); a scoped entry shadows a global
//! (or ancestor-scope) entry of the same name; a duplicate name within one layer is an error.
//! Every registration and its removal emits `system-prompt/change`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dsh_kernel::{Context, Disposer, Registration, ScopeKey};
use dsh_llm::ToolSchema;
use serde::Deserialize;

use crate::error::{PromptError, PromptItem};
use crate::render::is_valid_variable_name;
use crate::types::{
    AssembleContext, AssembleRequest, AssembledSection, PromptAssembly, PromptContext,
    PromptSection, SystemPromptAssemble, SystemPromptChange, ToolProviderFn, ToolProviderResult,
    VariableFn,
};

/// Name of the built-in harness identity section.
pub const IDENTITY_SECTION: &str = "harness:identity";
/// Order of the harness identity section.
pub const IDENTITY_ORDER: f64 = -100.0;
/// Text of the harness identity section. Decision: dsh names itself instead of upstream's
/// `You are an AI agent powered by DeepSeek Harness.` (dsh is not the upstream product; the
/// upstream corpus templates the system prompt as `{{system}}`, so no log depends on the text).
pub const IDENTITY_TEXT: &str = "You are an AI agent powered by dsh.";
/// Name of the deployment persona section (an agent preset shadows it by registering the same
/// name in the agent's scope).
pub const PERSONA_SECTION: &str = "deployment:persona";
/// Order of the persona section.
pub const PERSONA_ORDER: f64 = 0.0;
/// The reserved `tool_order` entry marking where unlisted tools go.
pub const TOOL_ORDER_REST: &str = "<unlisted-tools>";

/// The `dsh-system-prompt` settings section (snake_case; every field defaulted).
///
/// JSON: `{"include_harness_identity":true,"include_runtime_context":true,"persona":"",
/// "tool_order":[…]?}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SystemPromptConfig {
    /// Register the `harness:identity` section (default true).
    pub include_harness_identity: bool,
    /// Include dynamic runtime-context snapshots (default true); false registers a global
    /// suppressor.
    pub include_runtime_context: bool,
    /// The deployment-wide order-0 persona template (default empty ⇒ the section renders
    /// nothing). `{{variable}}` references are strict.
    pub persona: String,
    /// Tool names in order with exactly one [`TOOL_ORDER_REST`] entry; `None` ⇒ lexicographic.
    pub tool_order: Option<Vec<String>>,
}

impl Default for SystemPromptConfig {
    fn default() -> Self {
        Self {
            include_harness_identity: true,
            include_runtime_context: true,
            persona: String::new(),
            tool_order: None,
        }
    }
}

#[derive(Default)]
struct Layer {
    sections: Vec<(u64, PromptSection)>,
    contexts: Vec<(u64, PromptContext)>,
    variables: Vec<(u64, String, VariableFn)>,
    suppressors: Vec<u64>,
    tools: Vec<(u64, ToolProviderFn)>,
}

impl Layer {
    fn is_empty(&self) -> bool {
        self.sections.is_empty()
            && self.contexts.is_empty()
            && self.variables.is_empty()
            && self.suppressors.is_empty()
            && self.tools.is_empty()
    }

    fn remove(&mut self, id: u64) {
        self.sections.retain(|(i, _)| *i != id);
        self.contexts.retain(|(i, _)| *i != id);
        self.variables.retain(|(i, _, _)| *i != id);
        self.suppressors.retain(|i| *i != id);
        self.tools.retain(|(i, _)| *i != id);
    }
}

#[derive(Default)]
struct State {
    global: Layer,
    scoped: HashMap<ScopeKey, Layer>,
}

impl State {
    fn layer_mut(&mut self, scope: Option<&ScopeKey>) -> &mut Layer {
        match scope {
            None => &mut self.global,
            Some(k) => self.scoped.entry(k.clone()).or_default(),
        }
    }

    fn remove(&mut self, scope: Option<&ScopeKey>, id: u64) {
        match scope {
            None => self.global.remove(id),
            Some(k) => {
                if let Some(layer) = self.scoped.get_mut(k) {
                    layer.remove(id);
                    if layer.is_empty() {
                        self.scoped.remove(k);
                    }
                }
            }
        }
    }

    /// Existing scoped layers along the key's parent chain, farthest ancestor first.
    fn chain(&self, scope: Option<&ScopeKey>) -> Vec<&Layer> {
        let mut keys = Vec::new();
        let mut cur = scope;
        while let Some(k) = cur {
            keys.push(k);
            cur = k.parent();
        }
        keys.iter()
            .rev()
            .filter_map(|k| self.scoped.get(*k))
            .collect()
    }
}

/// Global entries followed by scope-chain shadows (farthest first): a shadow replaces the
/// entry in place, a new name is appended.
fn merge<T: Clone>(
    global: &[(u64, T)],
    chain: &[&Layer],
    pick: impl Fn(&Layer) -> &Vec<(u64, T)>,
    name: impl Fn(&T) -> &str,
) -> Vec<T> {
    let mut out: Vec<T> = global.iter().map(|(_, t)| t.clone()).collect();
    for layer in chain {
        for (_, t) in pick(layer) {
            match out.iter().position(|o| name(o) == name(t)) {
                Some(i) => out[i] = t.clone(),
                None => out.push(t.clone()),
            }
        }
    }
    out
}

/// The system-prompt registry (`ctx.systemPrompt`), provided as `Arc<SystemPrompt>` by the
/// `dsh-system-prompt` plugin.
pub struct SystemPrompt {
    ctx: Context,
    tool_order: Option<Vec<String>>,
    state: Arc<Mutex<State>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for SystemPrompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemPrompt")
            .field("tool_order", &self.tool_order)
            .finish_non_exhaustive()
    }
}

impl SystemPrompt {
    /// Creates the service owned by `ctx` (the plugin scope: change notifications and the
    /// assemble waterfall dispatch through it) and registers the built-ins globally through
    /// `ctx`: `harness:identity` (order −100, [`IDENTITY_TEXT`], unless
    /// `include_harness_identity` is false), `deployment:persona` (order 0, `config.persona`),
    /// and a runtime-context suppressor when `include_runtime_context` is false. `ctx` should be
    /// untagged (its key decides the built-ins' layer).
    ///
    /// # Errors
    /// [`PromptError::InvalidToolOrder`] (a name listed twice or no [`TOOL_ORDER_REST`]);
    /// [`PromptError::Kernel`] when `ctx` is inactive.
    pub fn new(ctx: Context, config: &SystemPromptConfig) -> Result<Arc<Self>, PromptError> {
        if let Some(order) = &config.tool_order {
            let mut seen = std::collections::HashSet::new();
            for name in order {
                if !seen.insert(name.as_str()) {
                    return Err(PromptError::InvalidToolOrder {
                        reason: format!("\"{name}\" is listed more than once"),
                    });
                }
            }
            if !seen.contains(TOOL_ORDER_REST) {
                return Err(PromptError::InvalidToolOrder {
                    reason: format!("the \"{TOOL_ORDER_REST}\" rest entry is missing"),
                });
            }
        }
        let this = Arc::new(Self {
            ctx: ctx.clone(),
            tool_order: config.tool_order.clone(),
            state: Arc::new(Mutex::new(State::default())),
            next_id: AtomicU64::new(1),
        });
        if config.include_harness_identity {
            this.section(
                &ctx,
                PromptSection::new(IDENTITY_SECTION, IDENTITY_ORDER, IDENTITY_TEXT),
            )?
            .detach();
        }
        this.section(
            &ctx,
            PromptSection::new(PERSONA_SECTION, PERSONA_ORDER, config.persona.clone()),
        )?
        .detach();
        if !config.include_runtime_context {
            this.suppress_runtime_context(&ctx)?.detach();
        }
        Ok(this)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(
        &self,
        ctx: &Context,
        label: &'static str,
        insert: impl FnOnce(&mut Layer, u64, bool) -> Result<(), PromptError>,
    ) -> Result<Registration, PromptError> {
        let scope = ctx.key().cloned();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut st = self.lock();
            let scoped = scope.is_some();
            let result = insert(st.layer_mut(scope.as_ref()), id, scoped);
            if let Err(e) = result {
                st.remove(scope.as_ref(), id);
                return Err(e);
            }
        }
        let state = Arc::downgrade(&self.state);
        let emitter = self.ctx.clone();
        let scope_for_undo = scope.clone();
        let reg = ctx.effect(
            label,
            vec![Disposer::infallible(move || {
                if let Some(state) = state.upgrade() {
                    state
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(scope_for_undo.as_ref(), id);
                    emitter.emit::<SystemPromptChange>(&());
                }
            })],
        );
        match reg {
            Ok(reg) => {
                self.ctx.emit::<SystemPromptChange>(&());
                Ok(reg)
            }
            Err(e) => {
                self.lock().remove(scope.as_ref(), id);
                Err(e.into())
            }
        }
    }

    /// Registers an ordered section in `ctx`'s scope layer.
    ///
    /// # Errors
    /// [`PromptError::InvalidOrder`] (non-finite order), [`PromptError::Duplicate`] (name taken
    /// in that layer), [`PromptError::Kernel`] (`ctx` inactive).
    pub fn section(
        &self,
        ctx: &Context,
        section: PromptSection,
    ) -> Result<Registration, PromptError> {
        if !section.order.is_finite() {
            return Err(PromptError::InvalidOrder {
                item: PromptItem::Section,
                name: section.name,
            });
        }
        self.register(ctx, "systemPrompt.section()", move |layer, id, scoped| {
            if layer.sections.iter().any(|(_, s)| s.name == section.name) {
                return Err(PromptError::Duplicate {
                    item: PromptItem::Section,
                    name: section.name,
                    scoped,
                });
            }
            layer.sections.push((id, section));
            Ok(())
        })
    }

    /// Registers an ordered dynamic runtime context in `ctx`'s scope layer.
    ///
    /// # Errors
    /// As [`SystemPrompt::section`].
    pub fn context(
        &self,
        ctx: &Context,
        context: PromptContext,
    ) -> Result<Registration, PromptError> {
        if !context.order.is_finite() {
            return Err(PromptError::InvalidOrder {
                item: PromptItem::Context,
                name: context.name,
            });
        }
        self.register(ctx, "systemPrompt.context()", move |layer, id, scoped| {
            if layer.contexts.iter().any(|(_, c)| c.name == context.name) {
                return Err(PromptError::Duplicate {
                    item: PromptItem::Context,
                    name: context.name,
                    scoped,
                });
            }
            layer.contexts.push((id, context));
            Ok(())
        })
    }

    /// Registers a variable provider for `{{name}}` in `ctx`'s scope layer (scoped values
    /// shadow global ones). Returning `None` leaves the variable without a value.
    ///
    /// # Errors
    /// [`PromptError::InvalidVariableName`] (not `[a-z][a-z0-9_]*`), [`PromptError::Duplicate`],
    /// [`PromptError::Kernel`].
    pub fn variable(
        &self,
        ctx: &Context,
        name: impl Into<String>,
        provider: impl Fn(&AssembleContext) -> Option<String> + Send + Sync + 'static,
    ) -> Result<Registration, PromptError> {
        let name = name.into();
        if !is_valid_variable_name(&name) {
            return Err(PromptError::InvalidVariableName { name });
        }
        let provider: VariableFn = Arc::new(provider);
        self.register(ctx, "systemPrompt.variable()", move |layer, id, scoped| {
            if layer.variables.iter().any(|(_, n, _)| *n == name) {
                return Err(PromptError::Duplicate {
                    item: PromptItem::Variable,
                    name,
                    scoped,
                });
            }
            layer.variables.push((id, name, provider));
            Ok(())
        })
    }

    /// [`SystemPrompt::variable`] with a fixed value.
    ///
    /// # Errors
    /// As [`SystemPrompt::variable`].
    pub fn variable_value(
        &self,
        ctx: &Context,
        name: impl Into<String>,
        value: impl Into<String>,
    ) -> Result<Registration, PromptError> {
        let value = value.into();
        self.variable(ctx, name, move |_| Some(value.clone()))
    }

    /// Suppresses every runtime context for `ctx`'s scope (global when untagged) while the
    /// registration lives. Suppressors are independent and anonymous.
    ///
    /// # Errors
    /// [`PromptError::Kernel`] when `ctx` is inactive.
    pub fn suppress_runtime_context(&self, ctx: &Context) -> Result<Registration, PromptError> {
        self.register(
            ctx,
            "systemPrompt.suppressRuntimeContext()",
            |layer, id, _| {
                layer.suppressors.push(id);
                Ok(())
            },
        )
    }

    /// Registers a tool-schema provider in `ctx`'s scope layer (global and chain providers all
    /// contribute).
    ///
    /// # Errors
    /// [`PromptError::Kernel`] when `ctx` is inactive.
    pub fn tools(
        &self,
        ctx: &Context,
        provider: impl Fn(&AssembleContext) -> ToolProviderResult + Send + Sync + 'static,
    ) -> Result<Registration, PromptError> {
        let provider: ToolProviderFn = Arc::new(provider);
        self.register(ctx, "systemPrompt.tools()", move |layer, id, _| {
            layer.tools.push((id, provider));
            Ok(())
        })
    }

    /// Assembles global + scope-chain registrations for `cx.scope`: sections sorted ascending by
    /// order (stable: ties keep registration order, a shadow keeps the shadowed entry's place),
    /// contexts likewise (none when suppressed anywhere on the chain), tools ordered, variables
    /// evaluated; then runs the scope-filtered `system-prompt/assemble` waterfall, whose result
    /// is authoritative except that an effective complete section is restored as the only
    /// section and suppression is re-applied.
    ///
    /// # Errors
    /// [`PromptError::MultipleComplete`] (more than one effective complete section),
    /// [`PromptError::ReservedToolName`], [`PromptError::UnknownToolInOrder`],
    /// [`PromptError::Listener`] (a waterfall listener returned `Err`).
    pub async fn assemble(&self, cx: AssembleContext) -> Result<PromptAssembly, PromptError> {
        let scope = cx.scope.clone();
        // Snapshot the effective entries under the lock; evaluate providers outside it.
        let (sections, contexts, variables, providers, suppressed) = {
            let st = self.lock();
            let chain = st.chain(scope.as_ref());
            let suppressed = !st.global.suppressors.is_empty()
                || chain.iter().any(|l| !l.suppressors.is_empty());
            let sections = merge(
                &st.global.sections,
                &chain,
                |l| &l.sections,
                |s| s.name.as_str(),
            );
            let contexts = merge(
                &st.global.contexts,
                &chain,
                |l| &l.contexts,
                |c| c.name.as_str(),
            );
            let mut variables: Vec<(String, VariableFn)> = Vec::new();
            for (_, name, f) in st
                .global
                .variables
                .iter()
                .chain(chain.iter().flat_map(|l| l.variables.iter()))
            {
                match variables.iter().position(|(n, _)| n == name) {
                    Some(i) => variables[i].1 = f.clone(),
                    None => variables.push((name.clone(), f.clone())),
                }
            }
            let providers: Vec<ToolProviderFn> = st
                .global
                .tools
                .iter()
                .chain(chain.iter().flat_map(|l| l.tools.iter()))
                .map(|(_, f)| f.clone())
                .collect();
            (sections, contexts, variables, providers, suppressed)
        };

        let mut sections = sections;
        sections.sort_by(|a, b| a.order.total_cmp(&b.order));
        let completes: Vec<&PromptSection> = sections.iter().filter(|s| s.complete).collect();
        if completes.len() > 1 {
            return Err(PromptError::MultipleComplete {
                names: completes.iter().map(|s| s.name.clone()).collect(),
            });
        }
        let mut complete: Option<AssembledSection> = None;
        let assembled_sections: Vec<AssembledSection> = sections
            .iter()
            .map(|s| {
                let a = AssembledSection::new(s.name.clone(), s.text.resolve(&cx));
                if s.complete {
                    complete = Some(a.clone());
                }
                a
            })
            .collect();

        let assembled_contexts = if suppressed {
            Vec::new()
        } else {
            let mut contexts = contexts;
            contexts.sort_by(|a, b| a.order.total_cmp(&b.order));
            contexts
                .iter()
                .map(|c| AssembledSection::new(c.name.clone(), c.text.resolve(&cx)))
                .collect()
        };

        let values = variables
            .into_iter()
            .map(|(name, f)| {
                let v = f(&cx);
                (name, v)
            })
            .collect();

        let mut collected = Vec::new();
        let mut known = std::collections::BTreeSet::new();
        for p in providers {
            let r = p(&cx);
            match r.known_names {
                Some(names) => known.extend(names),
                None => known.extend(r.schemas.iter().map(|s| s.name.clone())),
            }
            collected.extend(r.schemas);
        }
        let tools = order_tools(collected, self.tool_order.as_deref(), &known)?;

        let assembly = PromptAssembly {
            sections: assembled_sections,
            contexts: assembled_contexts,
            tools,
            variables: values,
        };
        let mut result = self
            .ctx
            .dispatch_to(scope.as_ref())
            .waterfall::<SystemPromptAssemble, _, _>(
                AssembleRequest {
                    assembly,
                    context: cx,
                },
                |req| async move { Ok(req.assembly) },
            )
            .await
            .map_err(PromptError::Listener)?;
        if let Some(c) = complete {
            result.sections = vec![c];
        }
        if suppressed {
            result.contexts.clear();
        }
        Ok(result)
    }
}

/// What the loop needs for one step: the assembly, the rendered system prompt (`None` when it
/// renders empty) and the rendered runtime-context sections.
#[derive(Clone, Debug, PartialEq)]
pub struct StepPrompt {
    /// The assembly (tools included).
    pub assembly: PromptAssembly,
    /// [`crate::render_prompt`] of the assembly, `None` when empty.
    pub system: Option<String>,
    /// [`crate::render_contexts`] of the assembly.
    pub contexts: Vec<dsh_llm::ContextSection>,
}

impl SystemPrompt {
    /// [`SystemPrompt::assemble`] then render the system prompt and the runtime contexts — one
    /// call per step for the agent loop (feed `contexts` to [`crate::snapshot_message`]).
    ///
    /// # Errors
    /// As [`SystemPrompt::assemble`] and [`crate::render_prompt`].
    pub async fn prepare_step(&self, cx: AssembleContext) -> Result<StepPrompt, PromptError> {
        let assembly = self.assemble(cx).await?;
        let system = crate::render::render_prompt(&assembly)?;
        let contexts = crate::render::render_contexts(&assembly)?;
        Ok(StepPrompt {
            system: (!system.is_empty()).then_some(system),
            contexts,
            assembly,
        })
    }
}

/// Applies `tool_order` (unlisted tools lexicographically at the rest entry) or lexicographic
/// order by name (byte-wise, locale-independent).
fn order_tools(
    mut tools: Vec<ToolSchema>,
    order: Option<&[String]>,
    known: &std::collections::BTreeSet<String>,
) -> Result<Vec<ToolSchema>, PromptError> {
    if tools.iter().any(|t| t.name == TOOL_ORDER_REST) {
        return Err(PromptError::ReservedToolName);
    }
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    let Some(order) = order else {
        return Ok(tools);
    };
    let unknown: Vec<String> = order
        .iter()
        .filter(|n| n.as_str() != TOOL_ORDER_REST && !known.contains(n.as_str()))
        .cloned()
        .collect();
    if !unknown.is_empty() {
        return Err(PromptError::UnknownToolInOrder {
            names: unknown,
            known: known.iter().cloned().collect(),
        });
    }
    let mut out = Vec::with_capacity(tools.len());
    for name in order {
        if name == TOOL_ORDER_REST {
            out.extend(tools.iter().filter(|t| !order.contains(&t.name)).cloned());
        } else {
            out.extend(tools.iter().filter(|t| &t.name == name).cloned());
        }
    }
    Ok(out)
}
