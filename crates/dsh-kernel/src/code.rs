//! Stable, machine-readable error codes: the [`ErrorCode`] trait and its derive.
//!
//! Every error enum of dsh has one `SCREAMING_SNAKE_CASE` code per variant. Codes are part of the
//! recorded formats (session logs, tool results, `dsh exec --json`), so they never change once
//! released; see `docs/formats.md`.

/// The derive for [`ErrorCode`] (from `dsh-kernel-macros`): `#[code("SOME_CODE")]` on each enum
/// variant (or on a struct), `#[code(transparent)]` on a single-field variant to forward the inner
/// error's code. A missing attribute is a compile error naming the variant.
///
/// ```
/// use dsh_kernel::ErrorCode;
///
/// #[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
/// enum TodoError {
///     #[error("empty content")]
///     #[code("INVALID_TODOS")]
///     Invalid,
///     #[error(transparent)]
///     #[code(transparent)]
///     Kernel(#[from] dsh_kernel::KernelError),
/// }
///
/// assert_eq!(TodoError::Invalid.code(), "INVALID_TODOS");
/// let inner = dsh_kernel::KernelError::DuplicatePlugin { id: "a".into() };
/// assert_eq!(TodoError::Kernel(inner).code(), "DUPLICATE_PLUGIN");
/// ```
pub use dsh_kernel_macros::ErrorCode;

/// An error with a stable, machine-readable code (`SCREAMING_SNAKE_CASE`, e.g.
/// `INACTIVE_SCOPE`).
///
/// Implement it with `#[derive(dsh_kernel::ErrorCode)]` (see the derive of the same name); the
/// code of each variant is written once, next to the variant and its doc comment. Codes are
/// stable: tests and recorded session logs compare them byte for byte.
pub trait ErrorCode {
    /// The stable code of this error. Never empty; `[A-Z][A-Z0-9_]*` for derived impls.
    fn code(&self) -> &'static str;
}

impl<T: ErrorCode + ?Sized> ErrorCode for &T {
    fn code(&self) -> &'static str {
        (**self).code()
    }
}

impl<T: ErrorCode + ?Sized> ErrorCode for Box<T> {
    fn code(&self) -> &'static str {
        (**self).code()
    }
}

impl<T: ErrorCode + ?Sized> ErrorCode for std::sync::Arc<T> {
    fn code(&self) -> &'static str {
        (**self).code()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    // The derive names the trait `dsh_kernel::ErrorCode`; inside the kernel that is this crate.
    use crate as dsh_kernel;
    use crate::{ErrorCode, KernelError};

    #[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
    enum Inner {
        #[error("inner")]
        #[code("INNER_CODE")]
        Only,
    }

    #[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
    enum Demo {
        #[error("unit")]
        #[code("UNIT_CODE")]
        Unit,
        #[error("tuple {0}")]
        #[code("TUPLE_CODE")]
        Tuple(u32, String),
        #[error("named {a}")]
        #[code("NAMED_CODE")]
        Named { a: u32, b: &'static str },
        #[error(transparent)]
        #[code(transparent)]
        Wrapped(#[from] Inner),
        #[error(transparent)]
        #[code(transparent)]
        Kernel(KernelError),
        #[error("boxed: {inner}")]
        #[code(transparent)]
        Boxed { inner: Box<Inner> },
    }

    #[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
    #[error("a struct error")]
    #[code("STRUCT_CODE")]
    struct Plain {
        _detail: String,
    }

    #[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
    #[error(transparent)]
    #[code(transparent)]
    struct Forward(Demo);

    #[derive(Debug, thiserror::Error, dsh_kernel::ErrorCode)]
    #[error("generic")]
    #[code("GENERIC_CODE")]
    struct Generic<T: std::fmt::Debug>(T);

    #[derive(Debug, dsh_kernel::ErrorCode)]
    enum Never {}

    // Attributes written inside a `macro_rules!` body carry that macro's hygiene.
    macro_rules! coded {
        ($name:ident, $variant:ident) => {
            #[derive(Debug, dsh_kernel::ErrorCode)]
            enum $name {
                #[code(transparent)]
                $variant(Inner),
                #[code("FROM_MACRO")]
                Other,
            }
            #[derive(Debug, dsh_kernel::ErrorCode)]
            #[code(transparent)]
            struct Wrapper($name);
        };
    }
    coded!(ViaMacro, Wrapped);

    #[test]
    fn each_variant_has_its_literal_code() {
        assert_eq!(Demo::Unit.code(), "UNIT_CODE");
        assert_eq!(Demo::Tuple(1, "x".into()).code(), "TUPLE_CODE");
        assert_eq!(Demo::Named { a: 1, b: "b" }.code(), "NAMED_CODE");
    }

    #[test]
    fn transparent_forwards_the_inner_code() {
        assert_eq!(Demo::Wrapped(Inner::Only).code(), "INNER_CODE");
        assert_eq!(
            Demo::Kernel(KernelError::DuplicatePlugin { id: "p".into() }).code(),
            "DUPLICATE_PLUGIN"
        );
        assert_eq!(
            Demo::Boxed {
                inner: Box::new(Inner::Only)
            }
            .code(),
            "INNER_CODE"
        );
        assert_eq!(Forward(Demo::Unit).code(), "UNIT_CODE");
        assert_eq!(Forward(Demo::Wrapped(Inner::Only)).code(), "INNER_CODE");
    }

    #[test]
    fn derives_from_macro_expansions_work() {
        assert_eq!(ViaMacro::Wrapped(Inner::Only).code(), "INNER_CODE");
        assert_eq!(ViaMacro::Other.code(), "FROM_MACRO");
        assert_eq!(Wrapper(ViaMacro::Other).code(), "FROM_MACRO");
    }

    #[test]
    fn structs_and_generics_have_their_code() {
        assert_eq!(
            Plain {
                _detail: String::new()
            }
            .code(),
            "STRUCT_CODE"
        );
        assert_eq!(Generic(7u8).code(), "GENERIC_CODE");
    }

    #[test]
    fn references_boxes_and_arcs_forward() {
        let e = Demo::Unit;
        assert_eq!(ErrorCode::code(&&e), "UNIT_CODE");
        let boxed: Box<dyn ErrorCode> = Box::new(Inner::Only);
        assert_eq!(boxed.code(), "INNER_CODE");
        assert_eq!(Arc::new(Demo::Unit).code(), "UNIT_CODE");
        // `Never` has no values; the impl exists and compiles (`match *self {}`).
        fn assert_impl<T: ErrorCode>() {}
        assert_impl::<Never>();
    }

    #[test]
    fn kernel_error_codes_are_unchanged() {
        let cases: Vec<(KernelError, &str)> = vec![
            (
                KernelError::InactiveScope {
                    label: "s".into(),
                    state: "disposed",
                },
                "INACTIVE_SCOPE",
            ),
            (
                KernelError::DuplicateService {
                    type_name: "T",
                    name: None,
                    scope: "root".into(),
                },
                "DUPLICATE_SERVICE",
            ),
            (
                KernelError::MissingService {
                    type_name: "T",
                    name: None,
                },
                "MISSING_SERVICE",
            ),
            (KernelError::ScopeParent { reason: "cycle" }, "SCOPE_PARENT"),
            (
                KernelError::DuplicatePlugin { id: "p".into() },
                "DUPLICATE_PLUGIN",
            ),
            (KernelError::PluginCycle { ids: vec![] }, "PLUGIN_CYCLE"),
            (
                KernelError::PluginFailed { failures: vec![] },
                "PLUGIN_FAILED",
            ),
            (
                KernelError::Parallel {
                    event: "e",
                    errors: vec![],
                },
                "PARALLEL_FAILED",
            ),
            (
                KernelError::Listener {
                    event: "e",
                    source: "x".into(),
                },
                "LISTENER_FAILED",
            ),
            (
                KernelError::InvalidSettings {
                    section: "s".into(),
                    message: "m".into(),
                },
                "INVALID_SETTINGS",
            ),
        ];
        for (e, code) in cases {
            assert_eq!(ErrorCode::code(&e), code, "{e:?}");
            assert_eq!(e.code(), code, "{e:?}");
        }
    }
}
