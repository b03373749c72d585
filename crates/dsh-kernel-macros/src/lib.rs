//! Derive macros of the dsh kernel. Use them through the kernel's re-exports
//! (`#[derive(thiserror::Error, dsh_kernel::ErrorCode)]`), never from this crate directly: the
//! generated code names the trait as `dsh_kernel::ErrorCode`.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Data, DeriveInput, Fields, LitStr, parse_macro_input};

/// Derives `dsh_kernel::ErrorCode` (`fn code(&self) -> &'static str`) from `#[code(…)]`
/// attributes, replacing a hand-written `match self { … => "CODE" }`.
///
/// * On an enum, every variant carries one attribute: `#[code("SOME_CODE")]` (that variant's
///   stable code) or `#[code(transparent)]` (the variant has exactly one field, whose own
///   `ErrorCode::code` is returned).
/// * On a struct, the struct itself carries `#[code("SOME_CODE")]`, or `#[code(transparent)]`
///   when it has exactly one field.
///
/// Codes are `SCREAMING_SNAKE_CASE`: an ASCII upper-case letter, then upper-case letters,
/// digits and `_`. Compile errors (each naming the variant or type): a missing, repeated or
/// malformed `#[code]` attribute, a code that is not SCREAMING_SNAKE_CASE, `transparent` on
/// anything but a single field, an attribute on an enum itself, and unions.
///
/// The generated impl names the trait `dsh_kernel::ErrorCode` (a relative path, resolved at the
/// derive site), so the kernel's own error module brings `use crate as dsh_kernel;` into scope.
/// Only the trait is implemented (no inherent method): callers bring `dsh_kernel::ErrorCode`
/// into scope to call `.code()`.
#[proc_macro_derive(ErrorCode, attributes(code))]
pub fn derive_error_code(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// What one `#[code(…)]` attribute says.
enum Spec {
    /// `#[code("LIT")]`.
    Literal(LitStr),
    /// `#[code(transparent)]`.
    Transparent(Span),
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    let body = match &input.data {
        Data::Enum(data) => {
            if let Some(attr) = input.attrs.iter().find(|a| a.path().is_ident("code")) {
                return Err(syn::Error::new(
                    attr.span(),
                    format!(
                        "`#[code]` goes on each variant of enum `{name}`, not on the enum itself"
                    ),
                ));
            }
            let mut arms = Vec::with_capacity(data.variants.len());
            for v in &data.variants {
                let what = format!("variant `{name}::{}`", v.ident);
                let spec = spec_of(&v.attrs, &what, v.ident.span())?;
                let ident = &v.ident;
                arms.push(match spec {
                    Spec::Literal(lit) => {
                        let pattern = match &v.fields {
                            Fields::Named(_) => quote!(Self::#ident { .. }),
                            Fields::Unnamed(_) => quote!(Self::#ident(..)),
                            Fields::Unit => quote!(Self::#ident),
                        };
                        quote!(#pattern => #lit,)
                    }
                    Spec::Transparent(span) => {
                        single_field(&v.fields, &what, span)?;
                        let pattern = match &v.fields {
                            Fields::Named(f) => {
                                let field = f.named.first().and_then(|f| f.ident.as_ref());
                                quote!(Self::#ident { #field: inner })
                            }
                            _ => quote!(Self::#ident(inner)),
                        };
                        let code = trait_code(span);
                        quote!(#pattern => #code(inner),)
                    }
                });
            }
            if arms.is_empty() {
                // An empty enum has no values: `match *self {}` is the whole body.
                quote!(match *self {})
            } else {
                quote!(match self { #(#arms)* })
            }
        }
        Data::Struct(data) => {
            let what = format!("struct `{name}`");
            match spec_of(&input.attrs, &what, name.span())? {
                Spec::Literal(lit) => quote!(#lit),
                Spec::Transparent(span) => {
                    single_field(&data.fields, &what, span)?;
                    let access = match &data.fields {
                        Fields::Named(f) => {
                            let field = f.named.first().and_then(|f| f.ident.as_ref());
                            quote!(&self.#field)
                        }
                        _ => quote!(&self.0),
                    };
                    let code = trait_code(span);
                    quote!(#code(#access))
                }
            }
        }
        Data::Union(_) => {
            return Err(syn::Error::new(
                name.span(),
                format!("`ErrorCode` cannot be derived for union `{name}`"),
            ));
        }
    };
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics dsh_kernel::ErrorCode for #name #ty_generics #where_clause {
            fn code(&self) -> &'static str {
                #body
            }
        }
    })
}

/// The path of the trait method, spanned at the `transparent` keyword so that an inner type
/// without `ErrorCode` is reported there (bindings and `self` keep the call-site span).
fn trait_code(span: Span) -> TokenStream2 {
    quote_spanned!(span=> dsh_kernel::ErrorCode::code)
}

/// The one `#[code(…)]` among `attrs`; `what` names the variant or type in error messages.
fn spec_of(attrs: &[Attribute], what: &str, span: Span) -> syn::Result<Spec> {
    let mut found: Option<Spec> = None;
    for attr in attrs.iter().filter(|a| a.path().is_ident("code")) {
        if found.is_some() {
            return Err(syn::Error::new(
                attr.span(),
                format!("{what} has more than one `#[code]` attribute"),
            ));
        }
        found = Some(parse_spec(attr, what)?);
    }
    found.ok_or_else(|| {
        syn::Error::new(
            span,
            format!("{what} needs `#[code(\"SOME_CODE\")]` or `#[code(transparent)]`"),
        )
    })
}

fn parse_spec(attr: &Attribute, what: &str) -> syn::Result<Spec> {
    let malformed = || {
        syn::Error::new(
            attr.span(),
            format!("{what}: expected `#[code(\"SOME_CODE\")]` or `#[code(transparent)]`"),
        )
    };
    if let Ok(lit) = attr.parse_args::<LitStr>() {
        let code = lit.value();
        if !is_screaming_snake(&code) {
            return Err(syn::Error::new(
                lit.span(),
                format!("{what}: code \"{code}\" is not SCREAMING_SNAKE_CASE ([A-Z][A-Z0-9_]*)"),
            ));
        }
        return Ok(Spec::Literal(lit));
    }
    match attr.parse_args::<syn::Ident>() {
        Ok(ident) if ident == "transparent" => Ok(Spec::Transparent(ident.span())),
        _ => Err(malformed()),
    }
}

fn single_field(fields: &Fields, what: &str, span: Span) -> syn::Result<()> {
    if fields.len() == 1 {
        Ok(())
    } else {
        Err(syn::Error::new(
            span,
            format!(
                "{what}: `#[code(transparent)]` needs exactly one field, found {}",
                fields.len()
            ),
        ))
    }
}

/// `[A-Z][A-Z0-9_]*`.
fn is_screaming_snake(code: &str) -> bool {
    let mut chars = code.chars();
    chars.next().is_some_and(|c| c.is_ascii_uppercase())
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(src: &str) -> Result<String, String> {
        let input: DeriveInput = syn::parse_str(src).map_err(|e| e.to_string())?;
        expand(&input)
            .map(|t| t.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn screaming_snake_accepts_and_rejects() {
        assert!(is_screaming_snake("INVALID_TODOS"));
        assert!(is_screaming_snake("E2BIG_2"));
        assert!(!is_screaming_snake(""));
        assert!(!is_screaming_snake("_LEADING"));
        assert!(!is_screaming_snake("9LIVES"));
        assert!(!is_screaming_snake("lower_case"));
        assert!(!is_screaming_snake("WITH-DASH"));
    }

    #[test]
    fn a_variant_without_code_is_an_error_naming_it() {
        assert_eq!(
            expand_str(r#"enum E { #[code("A")] A, B(u8) }"#),
            Err("variant `E::B` needs `#[code(\"SOME_CODE\")]` or `#[code(transparent)]`".into())
        );
    }

    #[test]
    fn a_struct_without_code_is_an_error_naming_it() {
        assert_eq!(
            expand_str("struct S;"),
            Err("struct `S` needs `#[code(\"SOME_CODE\")]` or `#[code(transparent)]`".into())
        );
    }

    #[test]
    fn malformed_attributes_are_errors() {
        assert_eq!(
            expand_str(r#"enum E { #[code("lower")] A }"#),
            Err(
                "variant `E::A`: code \"lower\" is not SCREAMING_SNAKE_CASE ([A-Z][A-Z0-9_]*)"
                    .into()
            )
        );
        assert_eq!(
            expand_str("enum E { #[code(opaque)] A }"),
            Err(
                "variant `E::A`: expected `#[code(\"SOME_CODE\")]` or `#[code(transparent)]`"
                    .into()
            )
        );
        assert_eq!(
            expand_str(r#"enum E { #[code("A")] #[code("B")] A }"#),
            Err("variant `E::A` has more than one `#[code]` attribute".into())
        );
        assert_eq!(
            expand_str(r#"#[code("X")] enum E { #[code("A")] A }"#),
            Err("`#[code]` goes on each variant of enum `E`, not on the enum itself".into())
        );
        assert_eq!(
            expand_str(r#"union U { a: u8 }"#),
            Err("`ErrorCode` cannot be derived for union `U`".into())
        );
    }

    #[test]
    fn transparent_needs_exactly_one_field() {
        assert_eq!(
            expand_str("enum E { #[code(transparent)] A(u8, u8) }"),
            Err("variant `E::A`: `#[code(transparent)]` needs exactly one field, found 2".into())
        );
        assert_eq!(
            expand_str("enum E { #[code(transparent)] A }"),
            Err("variant `E::A`: `#[code(transparent)]` needs exactly one field, found 0".into())
        );
        assert_eq!(
            expand_str("#[code(transparent)] struct S { a: u8, b: u8 }"),
            Err("struct `S`: `#[code(transparent)]` needs exactly one field, found 2".into())
        );
    }
}
