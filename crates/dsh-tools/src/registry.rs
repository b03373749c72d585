//! The tool registry service ([`ToolRegistry`]): layers, visibility, restrictions, guards and
//! the declared effects of each tool. The execution pipeline lives in [`crate::pipeline`].
//!
//! Behaviour notes: `docs/tools.md` ("Registry").
//!
//! # Layers and visibility
//! A tool registered through an untagged scope is *global*; through a tagged (agent) scope it is
//! *scoped* to that key. A caller with key `k` sees: tools scoped to `k`, then to `k`'s ancestors
//! (nearest first), then global ones — a scoped tool shadows a global one of the same name.
//! Registering a name twice in one layer is [`ToolsError::DuplicateTool`]. Restrictions
//! (`restrict`) registered for `k` or an ancestor filter every visible tool *except* the tools
//! scoped to `k` itself; several restrictions intersect.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use dsh_kernel::{Context, Disposer, Registration, ScopeKey};
use dsh_llm::ToolSchema;
use serde_json::Value;

use crate::definition::{ToolDefinition, check_name};
use crate::effects::ToolEffects;
use crate::error::ToolsError;
use crate::events::{ToolsChange, ToolsChanged};
use crate::result::ToolExecution;
use crate::schema;
use crate::tool::{Tool, into_definition};

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

pub(crate) struct Inner {
    pub(crate) ctx: Context,
    state: RwLock<State>,
    next_id: AtomicU64,
}

/// The tool registry service (`ctx.tools`), provided by the dsh-tools plugin on the root layer.
/// Cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct ToolRegistry {
    pub(crate) inner: Arc<Inner>,
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

    pub(crate) fn guards_for(&self, key: Option<&ScopeKey>) -> Vec<Arc<GuardFn>> {
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
}

impl ToolRegistry {
    /// Registers a [`Tool`] (its schemas generated from `T::Args`/`T::Output`) through `ctx`,
    /// exactly as [`ToolRegistry::register`] does for a hand-written definition.
    ///
    /// # Errors
    /// As [`into_definition`] (bad name, schema outside the subset) and
    /// [`ToolRegistry::register`].
    pub fn register_tool<T: Tool>(
        &self,
        ctx: &Context,
        tool: T,
    ) -> Result<Registration, ToolsError> {
        self.register(ctx, into_definition(tool)?)
    }

    /// The effects declared by the definition `name` resolves to for `key` (after shadowing
    /// and restrictions, as [`ToolRegistry::get`]); `None` when no such tool is visible.
    /// This is how policy plugins (e.g. permission presets) learn what a tool touches without
    /// depending on the plugin that defines it.
    pub fn effects(&self, name: &str, key: Option<&ScopeKey>) -> Option<ToolEffects> {
        self.get(name, key).map(|d| d.effects())
    }
}
