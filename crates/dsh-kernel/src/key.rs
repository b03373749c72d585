//! Scope keys: opaque identities that tag scopes for filtered dispatch.
//!
//! See docs/upstream/kernel.md (Scopes (dsh-scope)).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::{KernelError, Result};

static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

struct KeyInner {
    id: u64,
    label: String,
    parent: OnceLock<ScopeKey>,
}

/// An opaque identity that tags a scope (in the harness: one per agent).
///
/// Keys compare by identity: two keys are equal only if one is a clone of the other. A key may be
/// bound to a parent key once ([`ScopeKey::bind_parent`]); a listener tagged with an ancestor key
/// receives events dispatched to a descendant key.
#[derive(Clone)]
pub struct ScopeKey(Arc<KeyInner>);

impl ScopeKey {
    /// Mints a fresh key. `label` only appears in `Debug` output and logs.
    pub fn new(label: impl Into<String>) -> Self {
        Self(Arc::new(KeyInner {
            id: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
            label: label.into(),
            parent: OnceLock::new(),
        }))
    }

    /// A process-unique number identifying the key.
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// The label given at creation.
    pub fn label(&self) -> &str {
        &self.0.label
    }

    /// The parent key, if bound.
    pub fn parent(&self) -> Option<&ScopeKey> {
        self.0.parent.get()
    }

    /// Binds `parent` as this key's parent (once, acyclic).
    ///
    /// # Errors
    /// [`KernelError::ScopeParent`] if a parent is already bound, or if `parent` is this key or
    /// one of its descendants.
    pub fn bind_parent(&self, parent: &ScopeKey) -> Result<()> {
        if parent.is_self_or_descendant_of(self) {
            return Err(KernelError::ScopeParent {
                reason: "binding would create a cycle",
            });
        }
        self.0
            .parent
            .set(parent.clone())
            .map_err(|_| KernelError::ScopeParent {
                reason: "the key already has a parent",
            })
    }

    /// True if `ancestor` is this key or one of its ancestors.
    pub fn is_self_or_descendant_of(&self, ancestor: &ScopeKey) -> bool {
        let mut cur = Some(self);
        while let Some(k) = cur {
            if k == ancestor {
                return true;
            }
            cur = k.parent();
        }
        false
    }
}

impl PartialEq for ScopeKey {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ScopeKey {}

impl std::hash::Hash for ScopeKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.id.hash(state);
    }
}

impl fmt::Debug for ScopeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ScopeKey({}#{})", self.0.label, self.0.id)
    }
}
