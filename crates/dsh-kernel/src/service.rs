//! The typed service registry.
//!
//! Services are keyed by type (and optionally a name). Each scope is one layer: providing a
//! duplicate in the same layer is an error; child scopes see their ancestors' services and may
//! shadow them; a service disappears when the registration (or its scope) is disposed.
//!
//! Dependents are told through two kernel events, [`ServiceProvided`] and [`ServiceRemoved`]
//! (emit, unscoped): a plugin that cached a service listens for removal and drops it. The kernel
//! does not re-apply plugins (unlike Cordis fibers) — a deliberate simplification documented in
//! `docs/ARCHITECTURE.md`.

use std::any::{Any, TypeId};
use std::sync::Arc;

use crate::error::{KernelError, Result};
use crate::scope::{Context, Disposer, Registration, ServiceEntry};

/// Payload of [`ServiceProvided`] and [`ServiceRemoved`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceChange {
    /// `std::any::type_name` of the service type.
    pub type_name: &'static str,
    /// The service name, if it was provided with one.
    pub name: Option<String>,
    /// Label of the scope that provided it.
    pub scope: String,
}

crate::event! {
    /// `kernel/service-provided` (emit): a service was provided in some scope.
    pub struct ServiceProvided: emit("kernel/service-provided") => ServiceChange;
}

crate::event! {
    /// `kernel/service-removed` (emit): a service's registration was disposed.
    pub struct ServiceRemoved: emit("kernel/service-removed") => ServiceChange;
}

impl Context {
    /// Provides `value` as the service of type `T` in this scope layer.
    ///
    /// # Errors
    /// [`KernelError::DuplicateService`] if this layer already provides `T` (unnamed);
    /// [`KernelError::InactiveScope`] if the scope is disposing or disposed.
    pub fn provide<T: Send + Sync + 'static>(&self, value: Arc<T>) -> Result<Registration> {
        self.provide_inner(None, value)
    }

    /// Provides `value` as the service of type `T` named `name` in this scope layer.
    ///
    /// # Errors
    /// As [`Context::provide`], per `(T, name)`.
    pub fn provide_named<T: Send + Sync + 'static>(
        &self,
        name: impl Into<String>,
        value: Arc<T>,
    ) -> Result<Registration> {
        self.provide_inner(Some(name.into()), value)
    }

    fn provide_inner<T: Send + Sync + 'static>(
        &self,
        name: Option<String>,
        value: Arc<T>,
    ) -> Result<Registration> {
        let key = (TypeId::of::<T>(), name.clone());
        let type_name = std::any::type_name::<T>();
        let scope = self.inner.clone();
        let value: Arc<dyn Any + Send + Sync> = value;
        let change = ServiceChange {
            type_name,
            name: name.clone(),
            scope: scope.label.clone(),
        };
        let removed = change.clone();
        let ctx_for_removal = self.clone();
        let ((), reg) = self
            .inner
            .add_effect_with(format!("service:{type_name}"), || {
                let mut layer = scope.services.write().unwrap_or_else(|e| e.into_inner());
                if layer.contains_key(&key) {
                    return Err(KernelError::DuplicateService {
                        type_name,
                        name: name.clone(),
                        scope: scope.label.clone(),
                    });
                }
                layer.insert(
                    key.clone(),
                    ServiceEntry {
                        value: value.clone(),
                    },
                );
                let scope = scope.clone();
                Ok((
                    (),
                    vec![Disposer::infallible(move || {
                        let mut layer = scope.services.write().unwrap_or_else(|e| e.into_inner());
                        if layer
                            .get(&key)
                            .is_some_and(|e| Arc::ptr_eq(&e.value, &value))
                        {
                            layer.remove(&key);
                        }
                        drop(layer);
                        ctx_for_removal.emit::<ServiceRemoved>(&removed);
                    })],
                ))
            })?;
        self.emit::<ServiceProvided>(&change);
        Ok(reg)
    }

    /// The nearest service of type `T` (unnamed): this layer first, then ancestors.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        self.lookup::<T>(&(TypeId::of::<T>(), None))
    }

    /// The nearest service of type `T` named `name`.
    pub fn get_named<T: Send + Sync + 'static>(&self, name: &str) -> Option<Arc<T>> {
        self.lookup::<T>(&(TypeId::of::<T>(), Some(name.to_owned())))
    }

    /// Like [`Context::get`], but missing is an error.
    ///
    /// # Errors
    /// [`KernelError::MissingService`] if no scope in the chain provides `T`.
    pub fn require<T: Send + Sync + 'static>(&self) -> Result<Arc<T>> {
        self.get::<T>().ok_or(KernelError::MissingService {
            type_name: std::any::type_name::<T>(),
            name: None,
        })
    }

    fn lookup<T: Send + Sync + 'static>(&self, key: &(TypeId, Option<String>)) -> Option<Arc<T>> {
        let mut cur = Some(&self.inner);
        while let Some(scope) = cur {
            let found = scope
                .services
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(key)
                .map(|e| e.value.clone());
            if let Some(v) = found {
                return v.downcast::<T>().ok();
            }
            cur = scope.parent.as_ref();
        }
        None
    }
}
