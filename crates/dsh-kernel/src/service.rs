//! The typed service registry.
//!
//! Services are keyed by type (and optionally a name) and live in *layers*. The root has one;
//! plain child scopes (plugin scopes) share their parent's layer, so a plugin's services are
//! visible everywhere; isolated and tagged scopes (agent scopes) open a layer of their own that
//! sees the parent layer and may shadow it. Providing a duplicate in the same layer is an error;
//! a service disappears when its registration (or the providing scope) is disposed.
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
        let layer = self.inner.layer.clone();
        let value: Arc<dyn Any + Send + Sync> = value;
        let change = ServiceChange {
            type_name,
            name: name.clone(),
            scope: self.inner.label.clone(),
        };
        let removed = change.clone();
        let ctx_for_removal = self.clone();
        let ((), reg) = self
            .inner
            .add_effect_with(format!("service:{type_name}"), || {
                let mut services = layer.services.write().unwrap_or_else(|e| e.into_inner());
                if services.contains_key(&key) {
                    return Err(KernelError::DuplicateService {
                        type_name,
                        name: name.clone(),
                        scope: layer.label.clone(),
                    });
                }
                services.insert(
                    key.clone(),
                    ServiceEntry {
                        value: value.clone(),
                    },
                );
                drop(services);
                let layer = layer.clone();
                Ok((
                    (),
                    vec![Disposer::infallible(move || {
                        let mut services =
                            layer.services.write().unwrap_or_else(|e| e.into_inner());
                        if services
                            .get(&key)
                            .is_some_and(|e| Arc::ptr_eq(&e.value, &value))
                        {
                            services.remove(&key);
                        }
                        drop(services);
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
        let mut cur = Some(&self.inner.layer);
        while let Some(layer) = cur {
            let found = layer
                .services
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .get(key)
                .map(|e| e.value.clone());
            if let Some(v) = found {
                return v.downcast::<T>().ok();
            }
            cur = layer.parent.as_ref();
        }
        None
    }
}
