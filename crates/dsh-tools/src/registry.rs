//! The tool registry service ([`ToolRegistry`]) and the guarded execution pipeline.
//!
//! Spec: `../shared/spec/tools.md` ("Registry", "Pipeline (order)").
//!
//! # Layers and visibility
//! A tool registered through an untagged scope is *global*; through a tagged (agent) scope it is
//! *scoped* to that key. A caller with key `k` sees: tools scoped to `k`, then to `k`'s ancestors
//! (nearest first), then global ones — a scoped tool shadows a global one of the same name.
//! Registering a name twice in one layer is [`ToolsError::DuplicateTool`]. Restrictions
//! (`restrict`) registered for `k` or an ancestor filter every visible tool *except* the tools
//! scoped to `k` itself; several restrictions intersect.
//!
//! # Pipeline phases
//! [`ToolRegistry::execute`] runs the whole pipeline. The scheduler runs it in three phases so
//! that policy runs one call at a time, bodies overlap and results commit in model order:
//! [`ToolRegistry::prepare`] (materialise, entry abort check, `tools/pre-execute`, approval,
//! guards) → [`PreparedCall::dispatch`] (abort check, `tools/execute` around the body, abort
//! normalisation) → [`DispatchedCall::complete`] (`tools/post-execute`, deferred contexts,
//! `finalize_content`, freeze, `tools/result`).
//!
//! # Cancellation
//! - signal already cancelled when [`ToolRegistry::prepare`] starts ⇒ final
//!   `ABORTED_BEFORE_DISPATCH` result; policy and post-execute are skipped (nothing was asked);
//! - cancelled after policy but before the body starts ⇒ `ABORTED_BEFORE_DISPATCH`, which still
//!   passes post-execute;
//! - a body that started is always awaited; a *success* that finishes after the abort becomes
//!   `ABORTED` (`Error: tool call aborted`, info `{name: AbortError, code: ABORTED}`); a failure
//!   is kept as is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dsh_kernel::{Context, Disposer, Registration, ScopeKey};
use dsh_llm::{ContentBlock, ToolSchema};
use futures::FutureExt;
use serde_json::Value;

use crate::definition::{RunState, ToolDefinition, ToolRunContext, check_name};
use crate::error::ToolsError;
use crate::events::{
    ToolDispatchExecution, ToolResultEvent, ToolsChange, ToolsChanged, ToolsExecute,
    ToolsPostExecute, ToolsPreExecute, ToolsResult,
};
use crate::result::{
    PostToolDecision, PreToolDecision, ToolExecution, ToolExecutionInput, ToolExecutionResult,
    ToolExecutionSuccess,
};
use crate::schema;

/// Names no tool may register: `run_code` is the Code Mode entry point.
pub const RESERVED_NAMES: &[&str] = &["run_code"];

/// A monotonic guard: returns `Some(reason)` to deny a call; it can never allow one.
pub type GuardFn = dyn Fn(&ToolExecution) -> Option<String> + Send + Sync;

/// Whether a call may run in parallel with other parallel-safe calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionMode {
    /// Runs alone (a barrier).
    Exclusive,
    /// May join the rolling parallel pool.
    Parallel,
}

/// A restriction request: `allow` keeps only the listed names, `deny` removes the listed names.
/// At least one must be non-empty; every name must be non-empty and visible to the scope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolRestriction {
    /// Names to keep (`None` = no allow-list).
    pub allow: Option<Vec<String>>,
    /// Names to hide.
    pub deny: Option<Vec<String>>,
}

struct RestrictionEntry {
    id: u64,
    key: ScopeKey,
    allow: Option<BTreeSet<String>>,
    deny: BTreeSet<String>,
}

struct GuardEntry {
    id: u64,
    key: Option<ScopeKey>,
    f: Arc<GuardFn>,
}

type ToolMap = BTreeMap<String, Arc<dyn ToolDefinition>>;

#[derive(Default)]
struct State {
    global: ToolMap,
    scoped: HashMap<ScopeKey, ToolMap>,
    restrictions: Vec<RestrictionEntry>,
    guards: Vec<GuardEntry>,
}

struct Inner {
    ctx: Context,
    state: RwLock<State>,
    next_id: AtomicU64,
}

/// The tool registry service (`ctx.tools`), provided by the dsh-tools plugin on the root layer.
/// Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct ToolRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.read();
        f.debug_struct("ToolRegistry")
            .field("global", &st.global.keys().collect::<Vec<_>>())
            .field("scoped_layers", &st.scoped.len())
            .finish()
    }
}

fn scope_id(key: Option<&ScopeKey>) -> Option<u64> {
    key.map(ScopeKey::id)
}

impl ToolRegistry {
    /// A registry that dispatches its events through `ctx` (any scope of the kernel; the plugin
    /// uses its own scope).
    pub fn new(ctx: Context) -> Self {
        Self {
            inner: Arc::new(Inner {
                ctx,
                state: RwLock::new(State::default()),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.inner.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers `def` through `ctx`: global if `ctx` is untagged, else scoped to `ctx.key()`.
    /// The returned [`Registration`] belongs to `ctx` (dropping it, or disposing `ctx`,
    /// unregisters). Emits `tools/change` (`registered`, then `unregistered` on removal).
    ///
    /// # Errors
    /// [`ToolsError::InvalidToolName`], [`ToolsError::ReservedToolName`] (`run_code`),
    /// [`ToolsError::UnsupportedSchema`] (parameters outside the
    /// subset), [`ToolsError::DuplicateTool`] (same name in the same layer),
    /// [`ToolsError::Kernel`] (scope inactive).
    pub fn register(
        &self,
        ctx: &Context,
        def: Arc<dyn ToolDefinition>,
    ) -> Result<Registration, ToolsError> {
        let name = def.schema().name.clone();
        check_name(&name)?;
        if RESERVED_NAMES.contains(&name.as_str()) {
            return Err(ToolsError::ReservedToolName { name });
        }
        schema::check_subset(&name, &def.schema().parameters)?;
        let key = ctx.key().cloned();
        {
            let mut st = self.write();
            let layer = match &key {
                None => &mut st.global,
                Some(k) => st.scoped.entry(k.clone()).or_default(),
            };
            if layer.contains_key(&name) {
                return Err(ToolsError::DuplicateTool { name });
            }
            layer.insert(name.clone(), def.clone());
        }
        let this = Arc::downgrade(&self.inner);
        let rm_name = name.clone();
        let rm_key = key.clone();
        let reg = ctx.effect(
            format!("tool:{name}"),
            vec![Disposer::infallible(move || {
                let Some(inner) = this.upgrade() else { return };
                {
                    let mut st = inner.state.write().unwrap_or_else(|e| e.into_inner());
                    let layer = match &rm_key {
                        None => Some(&mut st.global),
                        Some(k) => st.scoped.get_mut(k),
                    };
                    if let Some(layer) = layer {
                        if layer.get(&rm_name).is_some_and(|d| Arc::ptr_eq(d, &def)) {
                            layer.remove(&rm_name);
                        }
                        if layer.is_empty()
                            && let Some(k) = &rm_key
                        {
                            st.scoped.remove(k);
                        }
                    }
                }
                inner
                    .ctx
                    .dispatch_to(rm_key.as_ref())
                    .emit::<ToolsChange>(&ToolsChanged {
                        kind: "unregistered",
                        names: vec![rm_name],
                        scope: scope_id(rm_key.as_ref()),
                    });
            })],
        );
        let reg = match reg {
            Ok(r) => r,
            Err(e) => {
                // Roll back the insertion.
                let mut st = self.write();
                let layer = match &key {
                    None => Some(&mut st.global),
                    Some(k) => st.scoped.get_mut(k),
                };
                if let Some(layer) = layer {
                    layer.remove(&name);
                }
                return Err(e.into());
            }
        };
        self.inner
            .ctx
            .dispatch_to(key.as_ref())
            .emit::<ToolsChange>(&ToolsChanged {
                kind: "registered",
                names: vec![name],
                scope: scope_id(key.as_ref()),
            });
        Ok(reg)
    }

    fn lookup_unrestricted(
        st: &State,
        key: Option<&ScopeKey>,
        name: &str,
    ) -> Option<(Arc<dyn ToolDefinition>, bool)> {
        let mut cur = key;
        let mut own = true;
        while let Some(k) = cur {
            if let Some(d) = st.scoped.get(k).and_then(|m| m.get(name)) {
                return Some((d.clone(), own));
            }
            own = false;
            cur = k.parent();
        }
        st.global.get(name).map(|d| (d.clone(), false))
    }

    fn restricted_out(st: &State, key: Option<&ScopeKey>, name: &str) -> bool {
        let Some(k) = key else { return false };
        st.restrictions.iter().any(|r| {
            k.is_self_or_descendant_of(&r.key)
                && (r.deny.contains(name) || r.allow.as_ref().is_some_and(|a| !a.contains(name)))
        })
    }

    fn lookup(st: &State, key: Option<&ScopeKey>, name: &str) -> Option<Arc<dyn ToolDefinition>> {
        let (def, own) = Self::lookup_unrestricted(st, key, name)?;
        if !own && Self::restricted_out(st, key, name) {
            return None;
        }
        Some(def)
    }

    /// The definition `name` resolves to for a caller with `key` (`None` = agentless: global
    /// tools only), after shadowing and restrictions.
    pub fn get(&self, name: &str, key: Option<&ScopeKey>) -> Option<Arc<dyn ToolDefinition>> {
        Self::lookup(&self.read(), key, name)
    }

    /// Every tool visible to `key`, lexicographic by name.
    pub fn visible(&self, key: Option<&ScopeKey>) -> Vec<Arc<dyn ToolDefinition>> {
        let st = self.read();
        let mut names: BTreeSet<&str> = st.global.keys().map(String::as_str).collect();
        let mut cur = key;
        while let Some(k) = cur {
            if let Some(m) = st.scoped.get(k) {
                names.extend(m.keys().map(String::as_str));
            }
            cur = k.parent();
        }
        names
            .into_iter()
            .filter_map(|n| Self::lookup(&st, key, n))
            .collect()
    }

    /// The model-facing schemas visible to `key`: only `{name, description, parameters}`
    /// (deep copies), lexicographic by name.
    pub fn schemas(&self, key: Option<&ScopeKey>) -> Vec<ToolSchema> {
        self.visible(key)
            .into_iter()
            .map(|d| d.schema().clone())
            .collect()
    }

    /// Restricts what the agent scope `ctx` (tagged) sees. Tools scoped to `ctx.key()` itself
    /// are exempt. Returns a [`Registration`] owned by `ctx`; emits `tools/change`.
    ///
    /// # Errors
    /// [`ToolsError::InvalidRestriction`] if `ctx` is untagged, if both lists are absent or
    /// empty, or if a name is empty or not visible to the scope; [`ToolsError::Kernel`] if the
    /// scope is inactive.
    pub fn restrict(
        &self,
        ctx: &Context,
        restriction: ToolRestriction,
    ) -> Result<Registration, ToolsError> {
        let bad = |reason: String| ToolsError::InvalidRestriction { reason };
        let Some(key) = ctx.key().cloned() else {
            return Err(bad("restrict() needs an agent (tagged) scope".into()));
        };
        let allow = restriction.allow.unwrap_or_default();
        let deny = restriction.deny.unwrap_or_default();
        let has_allow = !allow.is_empty();
        if !has_allow && deny.is_empty() {
            return Err(bad("allow and deny are both empty".into()));
        }
        {
            let st = self.read();
            for n in allow.iter().chain(deny.iter()) {
                if n.is_empty() {
                    return Err(bad("a tool name is empty".into()));
                }
                if Self::lookup_unrestricted(&st, Some(&key), n).is_none() {
                    return Err(bad(format!("unknown tool \"{n}\"")));
                }
            }
        }
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.write().restrictions.push(RestrictionEntry {
            id,
            key: key.clone(),
            allow: has_allow.then(|| allow.into_iter().collect()),
            deny: deny.into_iter().collect(),
        });
        let this = Arc::downgrade(&self.inner);
        let rm_key = key.clone();
        let reg = ctx
            .effect(
                "tool-restriction",
                vec![Disposer::infallible(move || {
                    let Some(inner) = this.upgrade() else { return };
                    inner
                        .state
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .restrictions
                        .retain(|r| r.id != id);
                    inner
                        .ctx
                        .dispatch_to(Some(&rm_key))
                        .emit::<ToolsChange>(&ToolsChanged {
                            kind: "unrestricted",
                            names: Vec::new(),
                            scope: Some(rm_key.id()),
                        });
                })],
            )
            .inspect_err(|_| self.write().restrictions.retain(|r| r.id != id))?;
        self.inner
            .ctx
            .dispatch_to(Some(&key))
            .emit::<ToolsChange>(&ToolsChanged {
                kind: "restricted",
                names: Vec::new(),
                scope: Some(key.id()),
            });
        Ok(reg)
    }

    /// Registers a monotonic guard through `ctx` (untagged ⇒ applies to every call; tagged ⇒
    /// to calls whose caller key is `ctx.key()` or a descendant). Guards run after an `allow`
    /// (global ones first, then scoped ones, each in registration order); the first `Some`
    /// denies.
    ///
    /// # Errors
    /// [`ToolsError::Kernel`] if the scope is inactive.
    pub fn guard(
        &self,
        ctx: &Context,
        f: impl Fn(&ToolExecution) -> Option<String> + Send + Sync + 'static,
    ) -> Result<Registration, ToolsError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.write().guards.push(GuardEntry {
            id,
            key: ctx.key().cloned(),
            f: Arc::new(f),
        });
        let this = Arc::downgrade(&self.inner);
        ctx.effect(
            "tool-guard",
            vec![Disposer::infallible(move || {
                if let Some(inner) = this.upgrade() {
                    inner
                        .state
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .guards
                        .retain(|g| g.id != id);
                }
            })],
        )
        .inspect_err(|_| self.write().guards.retain(|g| g.id != id))
        .map_err(Into::into)
    }

    /// Exclusive or parallel for this call: parallel only if the tool is visible and its
    /// `is_concurrency_safe(args)` returns true (a panic counts as exclusive).
    pub fn execution_mode(
        &self,
        name: &str,
        args: &Value,
        key: Option<&ScopeKey>,
    ) -> ExecutionMode {
        let Some(def) = self.get(name, key) else {
            return ExecutionMode::Exclusive;
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| def.is_concurrency_safe(args))) {
            Ok(true) => ExecutionMode::Parallel,
            _ => ExecutionMode::Exclusive,
        }
    }

    /// Runs the whole pipeline for one call and returns its frozen result.
    pub async fn execute(&self, input: ToolExecutionInput) -> Arc<ToolExecutionResult> {
        self.prepare(input).await.dispatch().await.complete().await
    }

    fn guards_for(&self, key: Option<&ScopeKey>) -> Vec<Arc<GuardFn>> {
        let st = self.read();
        if st.guards.is_empty() {
            return Vec::new();
        }
        let global = st.guards.iter().filter(|g| g.key.is_none());
        let scoped = st.guards.iter().filter(|g| {
            g.key
                .as_ref()
                .is_some_and(|gk| key.is_some_and(|k| k.is_self_or_descendant_of(gk)))
        });
        global.chain(scoped).map(|g| g.f.clone()).collect()
    }

    /// Phase 1: materialise the call, check the entry abort, run `tools/pre-execute`, approval
    /// (for `ask`) and guards. Never fails: every outcome is carried in the [`PreparedCall`].
    pub async fn prepare(&self, input: ToolExecutionInput) -> PreparedCall {
        let ToolExecutionInput {
            call_id,
            root_call_id,
            name,
            arguments,
            caller,
            signal,
        } = input;
        let key = caller.as_ref().map(|c| c.key.clone());
        // The definition is captured at call start (for finalize_content and dispatch).
        let def = self.get(&name, key.as_ref());
        let exec = Arc::new(ToolExecution {
            root_call_id: root_call_id.unwrap_or_else(|| call_id.clone()),
            call_id,
            name,
            arguments,
            caller,
            signal,
        });
        let mut call = PreparedCall {
            reg: self.clone(),
            exec: exec.clone(),
            def,
            run: Arc::new(RunState::default()),
            stage: Stage::Proceed,
        };
        if exec.signal.is_cancelled() {
            call.stage = Stage::Final(ToolExecutionResult::from_error(
                &ToolsError::AbortedBeforeDispatch,
            ));
            return call;
        }
        let decision = self
            .inner
            .ctx
            .dispatch_to(key.as_ref())
            .waterfall::<ToolsPreExecute, _, _>(exec.clone(), |_| async {
                Ok(PreToolDecision::Allow)
            })
            .await;
        let decision = match decision {
            Ok(d) => d,
            Err(e) => {
                call.stage = Stage::Final(policy_failure("tools/pre-execute", &e.to_string()));
                return call;
            }
        };
        let decision = match decision {
            PreToolDecision::Ask { reason } => match self.ask(&exec, reason).await {
                Ok(d) => d,
                Err(msg) => {
                    call.stage = Stage::Final(policy_failure("approval", &msg));
                    return call;
                }
            },
            other => other,
        };
        match decision {
            PreToolDecision::Allow => {}
            PreToolDecision::Deny { reason } => {
                call.stage = Stage::Denied(denial(reason));
                return call;
            }
            PreToolDecision::Ask { reason } => {
                // An ask can only come back from `ask` as allow/deny; keep fail-closed anyway.
                call.stage = Stage::Denied(denial(reason.unwrap_or_else(|| {
                    format!(
                        "tool \"{}\" requires approval (not yet supported)",
                        exec.name
                    )
                })));
                return call;
            }
        }
        for g in self.guards_for(key.as_ref()) {
            match std::panic::catch_unwind(AssertUnwindSafe(|| g(&exec))) {
                Ok(None) => {}
                Ok(Some(reason)) => {
                    call.stage = Stage::Denied(denial(reason));
                    return call;
                }
                Err(_) => {
                    call.stage = Stage::Final(policy_failure("guard", "guard panicked"));
                    return call;
                }
            }
        }
        call
    }

    /// Resolves an `ask` through the approval service. `Err` = the service threw.
    async fn ask(
        &self,
        exec: &Arc<ToolExecution>,
        reason: Option<String>,
    ) -> Result<PreToolDecision, String> {
        let name = &exec.name;
        let service = match &exec.caller {
            Some(c) => c.ctx.get::<dsh_approval::ApprovalService>(),
            None => self.inner.ctx.get::<dsh_approval::ApprovalService>(),
        };
        let Some(service) = service else {
            return Ok(PreToolDecision::Deny {
                reason: reason.unwrap_or_else(|| {
                    format!("tool \"{name}\" requires approval (not yet supported)")
                }),
            });
        };
        let Some(caller) = &exec.caller else {
            return Ok(PreToolDecision::Deny {
                reason: format!(
                    "tool \"{name}\" requires approval, but the call has no agent to route it through"
                ),
            });
        };
        let outcome = service
            .request(dsh_approval::ApprovalRequest {
                caller: caller.approval_caller(),
                tool_name: name.clone(),
                call_id: Some(exec.call_id.clone()),
                reason,
                signal: exec.signal.clone(),
            })
            .await
            .map_err(|e| e.to_string())?;
        use dsh_approval::ApprovalOutcome as O;
        Ok(match outcome {
            O::AllowedOnce => PreToolDecision::Allow,
            O::Rejected => PreToolDecision::Deny {
                reason: format!("the user rejected tool \"{name}\""),
            },
            O::Cancelled => PreToolDecision::Deny {
                reason: format!("approval for tool \"{name}\" was cancelled"),
            },
            O::Unavailable => PreToolDecision::Deny {
                reason: format!(
                    "tool \"{name}\" requires approval, but no approval channel is available"
                ),
            },
        })
    }
}

fn denial(reason: String) -> ToolExecutionResult {
    ToolExecutionResult::failure(reason, None)
}

fn policy_failure(stage: &'static str, message: &str) -> ToolExecutionResult {
    ToolExecutionResult::from_error(&ToolsError::PolicyFailed {
        stage,
        message: message.to_owned(),
    })
}

enum Stage {
    /// Policy allowed: the body may run.
    Proceed,
    /// Denied by policy/guards: skips the body, still passes post-execute.
    Denied(ToolExecutionResult),
    /// A final result that skips the body AND post-execute (entry abort, policy throw).
    Final(ToolExecutionResult),
}

/// A call after policy (phase 1 of 3). Call [`PreparedCall::dispatch`] next.
pub struct PreparedCall {
    reg: ToolRegistry,
    exec: Arc<ToolExecution>,
    def: Option<Arc<dyn ToolDefinition>>,
    run: Arc<RunState>,
    stage: Stage,
}

impl std::fmt::Debug for PreparedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedCall")
            .field("exec", &self.exec)
            .field("allowed", &matches!(self.stage, Stage::Proceed))
            .finish()
    }
}

impl PreparedCall {
    /// The materialised call.
    pub fn exec(&self) -> &Arc<ToolExecution> {
        &self.exec
    }

    /// True if policy allowed the call (its body will be dispatched unless aborted first).
    pub fn is_allowed(&self) -> bool {
        matches!(self.stage, Stage::Proceed)
    }

    /// Phase 2: if allowed and not aborted, runs `tools/execute` around the body and awaits it
    /// to completion (never abandoned). Safe to spawn (`'static`).
    pub async fn dispatch(self) -> DispatchedCall {
        let PreparedCall {
            reg,
            exec,
            def,
            run,
            stage,
        } = self;
        let (result, skip_post) = match stage {
            Stage::Final(r) => (r, true),
            Stage::Denied(r) => (r, false),
            Stage::Proceed => {
                if exec.signal.is_cancelled() {
                    (
                        ToolExecutionResult::from_error(&ToolsError::AbortedBeforeDispatch),
                        false,
                    )
                } else {
                    match run_execute(&reg, &exec, def.clone(), run.clone()).await {
                        Ok(r) => (r, false),
                        Err(r) => (r, true),
                    }
                }
            }
        };
        DispatchedCall {
            reg,
            exec,
            def,
            run,
            result,
            skip_post,
        }
    }
}

/// Runs the `tools/execute` waterfall. `Err(result)` = a wrapper threw (final, skips post).
async fn run_execute(
    reg: &ToolRegistry,
    exec: &Arc<ToolExecution>,
    def: Option<Arc<dyn ToolDefinition>>,
    run: Arc<RunState>,
) -> Result<ToolExecutionResult, ToolExecutionResult> {
    let payload = ToolDispatchExecution {
        exec: exec.clone(),
        def,
        signal: exec.signal.clone(),
    };
    let key = exec.key().cloned();
    let out = reg
        .inner
        .ctx
        .dispatch_to(key.as_ref())
        .waterfall::<ToolsExecute, _, _>(payload, move |d| run_body(d, run))
        .await;
    match out {
        Ok(mut result) => {
            if exec.signal.is_cancelled() && !result.is_error() {
                let ctx = std::mem::take(result.additional_contexts_mut());
                result = ToolExecutionResult::from_error(&ToolsError::Aborted);
                *result.additional_contexts_mut() = ctx;
            }
            Ok(result)
        }
        Err(e) => Err(policy_failure("tools/execute", &e.to_string())),
    }
}

/// The terminal of `tools/execute`: the body itself (or `UNKNOWN_TOOL`).
async fn run_body(
    d: ToolDispatchExecution,
    run: Arc<RunState>,
) -> Result<ToolExecutionResult, dsh_kernel::BoxError> {
    let ToolDispatchExecution { exec, def, signal } = d;
    let Some(def) = def else {
        return Ok(ToolExecutionResult::from_error(&ToolsError::UnknownTool {
            name: exec.name.clone(),
        }));
    };
    let cx = ToolRunContext {
        exec: exec.clone(),
        signal: signal.clone(),
        state: run.clone(),
    };
    let body = std::panic::catch_unwind(AssertUnwindSafe(|| def.execute(&exec.arguments, cx)));
    let body = match body {
        Ok(f) => f,
        Err(p) => return Ok(panicked(&exec.name, p.as_ref())),
    };
    let mut body = AssertUnwindSafe(body).catch_unwind();
    // Re-fuse the caller's signal: if the caller aborts, the body's (possibly replaced) signal
    // is cancelled too; the body is still awaited to completion.
    let outcome = tokio::select! {
        biased;
        r = &mut body => r,
        () = exec.signal.cancelled() => {
            signal.cancel();
            body.await
        }
    };
    let output = match outcome {
        Err(p) => return Ok(panicked(&exec.name, p.as_ref())),
        Ok(Err(f)) => return Ok(ToolExecutionResult::failure(f.message, f.info)),
        Ok(Ok(o)) => o,
    };
    if let Err(msg) = schema::validate(def.output_schema(), &output.value) {
        return Ok(ToolExecutionResult::from_error(
            &ToolsError::InvalidOutput {
                tool: exec.name.clone(),
                message: msg,
            },
        ));
    }
    if let Err(e) = dsh_session::check_lossless(&output.value) {
        return Ok(ToolExecutionResult::from_error(
            &ToolsError::InvalidOutput {
                tool: exec.name.clone(),
                message: format!("the value is not lossless JSON: {e}"),
            },
        ));
    }
    if let Some(meta) = &output.meta
        && let Err(e) = dsh_session::check_lossless(meta)
    {
        return Ok(ToolExecutionResult::from_error(
            &ToolsError::InvalidOutput {
                tool: exec.name.clone(),
                message: format!("meta is not lossless JSON: {e}"),
            },
        ));
    }
    let content = match output.content {
        Some(c) => c,
        None => match def.render(&exec.arguments, &output.value) {
            Ok(c) => c,
            Err(f) => return Ok(ToolExecutionResult::failure(f.message, f.info)),
        },
    };
    Ok(ToolExecutionResult::Success(ToolExecutionSuccess {
        value: output.value,
        content,
        meta: output.meta,
        additional_contexts: Vec::new(),
        concludes_turn: run.concluded.load(Ordering::Relaxed),
    }))
}

fn panicked(tool: &str, p: &(dyn std::any::Any + Send)) -> ToolExecutionResult {
    let message = if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    };
    ToolExecutionResult::from_error(&ToolsError::ToolPanicked {
        tool: tool.to_owned(),
        message,
    })
}

/// A call whose body (if any) has finished (phase 2 of 3). Call [`DispatchedCall::complete`]
/// when it is this call's turn to commit (model order).
pub struct DispatchedCall {
    reg: ToolRegistry,
    exec: Arc<ToolExecution>,
    def: Option<Arc<dyn ToolDefinition>>,
    run: Arc<RunState>,
    result: ToolExecutionResult,
    skip_post: bool,
}

impl std::fmt::Debug for DispatchedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DispatchedCall")
            .field("exec", &self.exec)
            .field("result", &self.result)
            .finish()
    }
}

impl DispatchedCall {
    /// The materialised call.
    pub fn exec(&self) -> &Arc<ToolExecution> {
        &self.exec
    }

    /// Phase 3: `tools/post-execute` (unless the outcome is final), deferred contexts,
    /// `finalize_content` (exactly once), freeze, `tools/result` emit.
    pub async fn complete(self) -> Arc<ToolExecutionResult> {
        let DispatchedCall {
            reg,
            exec,
            def,
            run,
            mut result,
            skip_post,
        } = self;
        let key = exec.key().cloned();
        if !skip_post {
            result = post_execute(&reg, &exec, def.as_deref(), result).await;
        }
        let deferred = std::mem::take(&mut *run.deferred.lock().unwrap_or_else(|e| e.into_inner()));
        if !deferred.is_empty() {
            let ctx = result.additional_contexts_mut();
            let rest = std::mem::take(ctx);
            ctx.extend(deferred);
            ctx.extend(rest);
        }
        if let Some(def) = &def {
            let fin =
                std::panic::catch_unwind(AssertUnwindSafe(|| def.finalize_content(&exec, &result)));
            match fin {
                Ok(Some(content)) => *result.content_mut() = content,
                Ok(None) => {}
                Err(_) => {
                    tracing::error!(target: "dsh_tools", tool = %exec.name, "finalize_content panicked; content kept");
                }
            }
        }
        let result = Arc::new(result);
        reg.inner
            .ctx
            .dispatch_to(key.as_ref())
            .emit::<ToolsResult>(&ToolResultEvent {
                exec,
                result: result.clone(),
            });
        result
    }
}

async fn post_execute(
    reg: &ToolRegistry,
    exec: &Arc<ToolExecution>,
    def: Option<&dyn ToolDefinition>,
    result: ToolExecutionResult,
) -> ToolExecutionResult {
    let key = exec.key().cloned();
    let shared = Arc::new(result);
    let decision = reg
        .inner
        .ctx
        .dispatch_to(key.as_ref())
        .waterfall::<ToolsPostExecute, _, _>(
            ToolResultEvent {
                exec: exec.clone(),
                result: shared.clone(),
            },
            |_| async { Ok(PostToolDecision::accept()) },
        )
        .await;
    let mut result = Arc::try_unwrap(shared).unwrap_or_else(|a| (*a).clone());
    let decision = match decision {
        Ok(d) => d,
        Err(e) => return policy_failure("tools/post-execute", &e.to_string()),
    };
    match decision {
        PostToolDecision::Accept {
            additional_contexts,
        } => {
            result.additional_contexts_mut().extend(additional_contexts);
            result
        }
        PostToolDecision::ReplaceContent {
            content,
            additional_contexts,
        } => {
            *result.content_mut() = content;
            result.additional_contexts_mut().extend(additional_contexts);
            result
        }
        PostToolDecision::ReplaceValue {
            value,
            additional_contexts,
        } => {
            let ToolExecutionResult::Success(mut s) = result else {
                return policy_failure("tools/post-execute", "replace-value on a failed call");
            };
            let Some(def) = def else {
                return policy_failure("tools/post-execute", "replace-value on an unknown tool");
            };
            if let Err(msg) = schema::validate(def.output_schema(), &value) {
                return ToolExecutionResult::from_error(&ToolsError::InvalidOutput {
                    tool: exec.name.clone(),
                    message: msg,
                });
            }
            match def.render(&exec.arguments, &value) {
                Ok(content) => s.content = content,
                Err(f) => return ToolExecutionResult::failure(f.message, f.info),
            }
            s.value = value;
            s.additional_contexts.extend(additional_contexts);
            ToolExecutionResult::Success(s)
        }
        PostToolDecision::Block {
            feedback,
            additional_contexts,
        } => {
            let text: String = feedback
                .iter()
                .filter_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n");
            let message = if text.is_empty() {
                "tool result blocked by post-execute policy".to_owned()
            } else {
                text
            };
            let mut ctx = std::mem::take(result.additional_contexts_mut());
            ctx.extend(additional_contexts);
            ToolExecutionResult::Failure(crate::result::ToolExecutionFailure {
                error: crate::result::ToolErrorPayload {
                    message,
                    info: None,
                },
                content: feedback,
                meta: result.meta().cloned(),
                additional_contexts: ctx,
            })
        }
    }
}
