//! The event-type registry: which non-core (log-only) event types a session accepts.
//!
//! See docs/upstream/session.md (Plugin-merged log-only types, with upstream's full catalog). A plugin declares its log-only types with [`EventTypeRegistry::register`]
//! (name, whether it may stand between turns, optional typed validation). The registry also
//! ships [`UPSTREAM_LOG_ONLY_TYPES`]: upstream's plugin types no dsh plugin implements yet, known
//! as opaque so upstream logs load. A dsh plugin registering one of those names takes it over.
//! A type that is neither core, registered, nor marked `ignorable` is refused
//! (`UNKNOWN_EVENT_TYPE`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use serde_json::Value;

use crate::error::SessionError;
use crate::event::EventType;

/// Upstream 0.1.1-rc.2 plugin log-only event types (its generated persistence catalog).
pub const UPSTREAM_LOG_ONLY_TYPES: &[&str] = &[
    "agent/inbox/spliced",
    "agent-preset/selected",
    "approval/asked",
    "approval/decided",
    "approval/policy",
    "command/run",
    "command/done",
    "compaction/start",
    "compaction/summary",
    "compaction/end",
    "compaction/prune",
    "feedback/record",
    "goal/change",
    "hook/invoked",
    "hook/result",
    "llm/retry",
    "llm/retry-started",
    "permission/preset",
    "plan/mode",
    "sandbox/mode",
    "schedule/change",
    "session/title",
    "session/title-llm-request",
    "subagent/descriptor",
    "team/member",
    "team/message/delivered",
    "team/message/queued",
    "team/task",
    "tool/code-dispatch",
    "tool/code-dispatch-start",
    "tool-workflow/run-start",
    "tool-workflow/run-end",
    "tool-workflow/agent-start",
    "tool-workflow/agent-end",
    "web/deepseek-search-llm-request",
];

/// Owner name of the built-in upstream catalog entries.
pub const UPSTREAM_CATALOG_OWNER: &str = "upstream-catalog";

/// Types refused outright (legacy): `request/header-delta`.
pub const FORBIDDEN_TYPES: &[&str] = &["request/header-delta"];

/// A payload validator: `Err(message)` refuses the event (`INVALID_PLUGIN_PAYLOAD`).
pub type PayloadValidator = Arc<dyn Fn(&Value) -> Result<(), String> + Send + Sync>;

/// A plugin's declaration of one log-only event type.
#[derive(Clone)]
pub struct EventTypeDecl {
    /// The type name (e.g. `compaction/start`).
    pub name: String,
    /// The declaring plugin's id.
    pub owner: String,
    /// May it stand between turns (outside any open turn)?
    pub between_turns: bool,
    /// Optional payload validation, run on append and restore.
    pub validate: Option<PayloadValidator>,
}

impl std::fmt::Debug for EventTypeDecl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventTypeDecl")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("between_turns", &self.between_turns)
            .field("validate", &self.validate.is_some())
            .finish()
    }
}

impl EventTypeDecl {
    /// A declaration without validation.
    pub fn new(name: impl Into<String>, owner: impl Into<String>, between_turns: bool) -> Self {
        Self {
            name: name.into(),
            owner: owner.into(),
            between_turns,
            validate: None,
        }
    }

    /// Adds a validator.
    pub fn with_validator(
        mut self,
        f: impl Fn(&Value) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.validate = Some(Arc::new(f));
        self
    }

    /// Adds a typed validator: the payload must deserialize into `T` (and round-trip to an
    /// equal JSON value, so no field is silently unmodelled).
    pub fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(self) -> Self {
        self.with_validator(|v| {
            let t: T = T::deserialize(v).map_err(|e| e.to_string())?;
            let back = serde_json::to_value(&t).map_err(|e| e.to_string())?;
            if crate::lossless::json_equiv(&back, v) {
                Ok(())
            } else {
                Err("payload has fields the declared type does not model".to_owned())
            }
        })
    }
}

/// How the registry classifies a type name.
#[derive(Debug, Clone)]
pub enum TypeStatus {
    /// One of the 13 core types.
    Core,
    /// A declared log-only type (plugin or upstream catalog).
    Declared(EventTypeDecl),
    /// Legacy type refused outright.
    Forbidden,
    /// Not known.
    Unknown,
}

/// The registry. Cheap to share (`Arc`); reads take a read lock.
#[derive(Debug)]
pub struct EventTypeRegistry {
    types: RwLock<HashMap<String, EventTypeDecl>>,
}

impl Default for EventTypeRegistry {
    fn default() -> Self {
        Self::with_upstream_catalog()
    }
}

impl EventTypeRegistry {
    /// A registry holding only the upstream catalog (every entry `between_turns = true`,
    /// no validation, owner [`UPSTREAM_CATALOG_OWNER`]).
    pub fn with_upstream_catalog() -> Self {
        let types = UPSTREAM_LOG_ONLY_TYPES
            .iter()
            .map(|n| {
                (
                    (*n).to_owned(),
                    EventTypeDecl::new(*n, UPSTREAM_CATALOG_OWNER, true),
                )
            })
            .collect();
        Self {
            types: RwLock::new(types),
        }
    }

    /// A registry with no declared types at all (core types only).
    pub fn empty() -> Self {
        Self {
            types: RwLock::new(HashMap::new()),
        }
    }

    /// The process-wide default registry (upstream catalog) used by bare sessions.
    pub fn shared_default() -> Arc<EventTypeRegistry> {
        static DEFAULT: OnceLock<Arc<EventTypeRegistry>> = OnceLock::new();
        DEFAULT
            .get_or_init(|| Arc::new(Self::with_upstream_catalog()))
            .clone()
    }

    /// Declares a log-only type. Takes over an upstream-catalog name; re-registering by the
    /// same owner replaces the declaration.
    ///
    /// # Errors
    /// [`SessionError::Registration`] when the name is core, forbidden, empty, or declared by
    /// another plugin.
    pub fn register(&self, decl: EventTypeDecl) -> Result<(), SessionError> {
        let err = |m: &str| SessionError::Registration {
            kind: decl.name.clone(),
            message: m.to_owned(),
        };
        if decl.name.is_empty() {
            return Err(err("empty type name"));
        }
        if EventType::from(decl.name.as_str()).core().is_some() {
            return Err(err("core types cannot be re-declared"));
        }
        if FORBIDDEN_TYPES.contains(&decl.name.as_str()) {
            return Err(err("legacy type is refused"));
        }
        let mut types = self.types.write().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = types.get(&decl.name)
            && existing.owner != UPSTREAM_CATALOG_OWNER
            && existing.owner != decl.owner
        {
            return Err(err(&format!("already declared by `{}`", existing.owner)));
        }
        types.insert(decl.name.clone(), decl);
        Ok(())
    }

    /// Declares `decl` for the lifetime of `ctx`'s scope: the declaration is removed (an
    /// upstream-catalog name reverts to the catalog) when the returned registration is dropped
    /// or the scope disposed. Call `.detach()` to bind it to the scope.
    ///
    /// # Errors
    /// As [`EventTypeRegistry::register`]; [`SessionError::Registration`] if the scope is
    /// inactive (the declaration is rolled back).
    pub fn register_scoped(
        self: &Arc<Self>,
        ctx: &dsh_kernel::Context,
        decl: EventTypeDecl,
    ) -> Result<dsh_kernel::Registration, SessionError> {
        let (name, owner) = (decl.name.clone(), decl.owner.clone());
        self.register(decl)?;
        let me = self.clone();
        let (n2, o2) = (name.clone(), owner.clone());
        ctx.effect(
            format!("event type {name}"),
            vec![dsh_kernel::Disposer::infallible(move || {
                me.unregister(&n2, &o2);
            })],
        )
        .map_err(|e| {
            self.unregister(&name, &owner);
            SessionError::Registration {
                kind: name.clone(),
                message: e.to_string(),
            }
        })
    }

    /// Removes a plugin's declaration; an upstream-catalog name reverts to the catalog entry.
    /// Returns whether something was removed.
    pub fn unregister(&self, name: &str, owner: &str) -> bool {
        let mut types = self.types.write().unwrap_or_else(|p| p.into_inner());
        match types.get(name) {
            Some(d) if d.owner == owner && owner != UPSTREAM_CATALOG_OWNER => {
                if UPSTREAM_LOG_ONLY_TYPES.contains(&name) {
                    types.insert(
                        name.to_owned(),
                        EventTypeDecl::new(name, UPSTREAM_CATALOG_OWNER, true),
                    );
                } else {
                    types.remove(name);
                }
                true
            }
            _ => false,
        }
    }

    /// Classifies a type name.
    pub fn status(&self, kind: &EventType) -> TypeStatus {
        if kind.core().is_some() {
            return TypeStatus::Core;
        }
        if FORBIDDEN_TYPES.contains(&kind.as_str()) {
            return TypeStatus::Forbidden;
        }
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        match types.get(kind.as_str()) {
            Some(d) => TypeStatus::Declared(d.clone()),
            None => TypeStatus::Unknown,
        }
    }

    /// The declaration of a non-core type, if any.
    pub fn get(&self, name: &str) -> Option<EventTypeDecl> {
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        types.get(name).cloned()
    }

    /// Every declared name, sorted.
    pub fn names(&self) -> Vec<String> {
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<String> = types.keys().cloned().collect();
        v.sort();
        v
    }

    /// Whether the declared non-core type `kind` may stand between turns; `None` when `kind` is
    /// core, forbidden or unknown. Same answer as [`EventTypeRegistry::status`] without cloning
    /// the declaration (read on every opaque append).
    pub fn declared_between_turns(&self, kind: &EventType) -> Option<bool> {
        if kind.core().is_some() || FORBIDDEN_TYPES.contains(&kind.as_str()) {
            return None;
        }
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        types.get(kind.as_str()).map(|d| d.between_turns)
    }

    /// [`EventTypeRegistry::admit`] without returning (so without cloning) the declaration:
    /// the append hot path only needs the verdict. Same errors.
    pub(crate) fn check_admit(
        &self,
        kind: &EventType,
        opaque: Option<&Value>,
        ignorable: bool,
    ) -> Result<(), SessionError> {
        if kind.core().is_some() {
            return Ok(());
        }
        if FORBIDDEN_TYPES.contains(&kind.as_str()) {
            return Err(SessionError::ForbiddenEventType {
                kind: kind.to_string(),
                message: "legacy request/header-delta logs are not supported".to_owned(),
            });
        }
        // Only the validator handle is copied out; it runs after the read lock is released.
        let validator = {
            let types = self.types.read().unwrap_or_else(|p| p.into_inner());
            match types.get(kind.as_str()) {
                Some(d) => d.validate.clone(),
                None if ignorable => return Ok(()),
                None => {
                    return Err(SessionError::UnknownEventType {
                        kind: kind.to_string(),
                    });
                }
            }
        };
        if let (Some(v), Some(f)) = (opaque, validator) {
            f(v).map_err(|message| SessionError::InvalidPluginPayload {
                kind: kind.to_string(),
                message,
            })?;
        }
        Ok(())
    }

    /// Admits an event of type `kind` with payload `data` (as JSON, for non-core types) and the
    /// `ignorable` flag. Returns the declaration (for between-turn checks) when declared.
    ///
    /// # Errors
    /// [`SessionError::ForbiddenEventType`] (legacy `request/header-delta`),
    /// [`SessionError::UnknownEventType`] (unknown and not ignorable),
    /// [`SessionError::InvalidPluginPayload`] (validator refused).
    pub fn admit(
        &self,
        kind: &EventType,
        opaque: Option<&Value>,
        ignorable: bool,
    ) -> Result<Option<EventTypeDecl>, SessionError> {
        if kind.core().is_some() {
            return Ok(None);
        }
        match self.status(kind) {
            TypeStatus::Core => Ok(None),
            TypeStatus::Forbidden => Err(SessionError::ForbiddenEventType {
                kind: kind.to_string(),
                message: "legacy request/header-delta logs are not supported".to_owned(),
            }),
            TypeStatus::Declared(d) => {
                if let (Some(v), Some(f)) = (opaque, &d.validate) {
                    f(v).map_err(|message| SessionError::InvalidPluginPayload {
                        kind: kind.to_string(),
                        message,
                    })?;
                }
                Ok(Some(d))
            }
            TypeStatus::Unknown if ignorable => Ok(None),
            TypeStatus::Unknown => Err(SessionError::UnknownEventType {
                kind: kind.to_string(),
            }),
        }
    }
}
