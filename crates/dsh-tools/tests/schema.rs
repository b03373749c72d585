//! Schema generation (nested / optional / enum args), the subset check, and `INVALID_ARGS`
//! wording for model mistakes.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use dsh_kernel::ErrorCode;
use dsh_tools::{ToolsError, define_tool, parse_args, schema};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// How to sort.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
enum Order {
    /// Oldest first.
    Asc,
    /// Newest first.
    Desc,
}

/// Paging options.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Paging {
    /// Page size.
    limit: u32,
    /// Sort order.
    order: Option<Order>,
}

/// Search arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct SearchArgs {
    /// What to look for.
    query: String,
    /// Optional paging.
    paging: Option<Paging>,
    /// Tags to match.
    tags: Vec<String>,
    /// Case sensitive?
    #[serde(default)]
    case_sensitive: bool,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Hits {
    count: u64,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
#[allow(dead_code)]
enum Mode {
    ReadOnly,
    WorkspaceWrite,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct ModeArgs {
    mode: Mode,
    modes: Option<Vec<Mode>>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct MapArgs {
    env: std::collections::HashMap<String, String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct Tree {
    name: String,
    children: Vec<Tree>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
enum Loose {
    N(u32),
    S(String),
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct LooseArgs {
    v: Loose,
}

#[test]
fn nested_optional_and_documented_enum_schema_is_exact() {
    let s = schema::generate_schema::<SearchArgs>("search").unwrap();
    let expected = json!({
        "type": "object",
        "additionalProperties": false,
        "description": "Search arguments.",
        "required": ["query", "tags"],
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "paging": {
                "description": "Optional paging.",
                "type": "object",
                "additionalProperties": false,
                "required": ["limit"],
                "properties": {
                    "limit": {"type": "integer", "description": "Page size."},
                    "order": {
                        "description": "Sort order.",
                        "oneOf": [
                            {"type": "string", "const": "asc", "description": "Oldest first."},
                            {"type": "string", "const": "desc", "description": "Newest first."}
                        ]
                    }
                }
            },
            "tags": {"type": "array", "description": "Tags to match.", "items": {"type": "string"}},
            "case_sensitive": {"type": "boolean", "description": "Case sensitive?", "default": false}
        }
    });
    assert_eq!(s, expected);
    // Key order is deterministic too (preserve_order): compare the serialised text.
    assert_eq!(
        serde_json::to_string(&s).unwrap(),
        serde_json::to_string(&expected).unwrap()
    );
}

#[test]
fn plain_enum_and_optional_vec_schema_is_exact() {
    let s = schema::generate_schema::<ModeArgs>("mode").unwrap();
    assert_eq!(
        s,
        json!({
            "type": "object",
            "required": ["mode"],
            "properties": {
                "mode": {"type": "string", "enum": ["read-only", "workspace-write"]},
                "modes": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["read-only", "workspace-write"]}
                }
            }
        })
    );
}

#[test]
fn output_schema_of_a_struct_and_of_unit() {
    assert_eq!(
        schema::generate_schema::<Hits>("t").unwrap(),
        json!({"type": "object", "required": ["count"], "properties": {"count": {"type": "integer"}}})
    );
    assert_eq!(
        schema::generate_schema::<()>("t").unwrap(),
        json!({"type": "null"})
    );
}

#[test]
fn unsupported_shapes_are_rejected_with_code_and_path() {
    let e = schema::generate_schema::<MapArgs>("m").unwrap_err();
    assert_eq!(e.code(), "UNSUPPORTED_SCHEMA");
    assert_eq!(
        e.to_string(),
        "tool \"m\": unsupported schema at /properties/env/additionalProperties: `additionalProperties` must be a boolean (maps are not supported)"
    );
    let e = schema::generate_schema::<Tree>("t").unwrap_err();
    assert_eq!(e.code(), "UNSUPPORTED_SCHEMA");
    assert_eq!(
        e.to_string(),
        "tool \"t\": unsupported schema at /properties/children/items: recursive type (`$ref: #`) cannot be inlined"
    );
    let e = schema::generate_schema::<LooseArgs>("l").unwrap_err();
    assert_eq!(e.code(), "UNSUPPORTED_SCHEMA");
    assert!(e.to_string().contains("`anyOf` is not supported"), "{e}");
}

#[test]
fn subset_check_rejects_foreign_keywords_and_accepts_annotations() {
    let ok = json!({"type": "object", "title": "T", "description": "d", "properties": {
        "a": {"type": "string", "default": "x", "examples": ["y"]},
        "b": {"oneOf": [{"const": 1}, {"const": 2}]},
        "c": {"type": ["string", "null"]}
    }, "required": ["a"], "additionalProperties": false});
    schema::check_subset("t", &ok).unwrap();
    for (bad, path, kw) in [
        (json!({"type": "string", "pattern": "^a"}), "", "pattern"),
        (
            json!({"type": "object", "properties": {"x": {"type": "integer", "minimum": 0}}}),
            "/properties/x",
            "minimum",
        ),
        (json!({"allOf": [{"type": "string"}]}), "", "allOf"),
        (json!({"$ref": "#/$defs/X"}), "", "$ref"),
    ] {
        let e = schema::check_subset("t", &bad).unwrap_err();
        assert_eq!(
            e,
            ToolsError::UnsupportedSchema {
                tool: "t".into(),
                path: path.into(),
                reason: format!("keyword `{kw}` is not supported"),
            }
        );
    }
    let e = schema::check_subset("t", &json!({"oneOf": [{"type": "string"}]})).unwrap_err();
    assert_eq!(
        e.to_string(),
        "tool \"t\": unsupported schema at /oneOf: `oneOf` needs at least 2 branches"
    );
}

#[test]
fn typed_tool_publishes_exact_schema() {
    let def = define_tool::<ModeArgs, Hits>("set_mode", "Set the mode.")
        .execute(|_a, _cx| async { Ok(Hits { count: 0 }) })
        .unwrap();
    let s = def.schema();
    assert_eq!(s.name, "set_mode");
    assert_eq!(s.description, "Set the mode.");
    assert_eq!(s.parameters["required"], json!(["mode"]));
    assert_eq!(
        def.output_schema(),
        &json!({"type": "object", "required": ["count"], "properties": {"count": {"type": "integer"}}})
    );
    let e = define_tool::<MapArgs, Hits>("bad", "x")
        .execute(|_a, _cx| async { Ok(Hits { count: 0 }) })
        .err()
        .unwrap();
    assert_eq!(e.code(), "UNSUPPORTED_SCHEMA");
    let e = define_tool::<ModeArgs, Hits>("bad name", "x")
        .execute(|_a, _cx| async { Ok(Hits { count: 0 }) })
        .err()
        .unwrap();
    assert_eq!(e.code(), "INVALID_TOOL_NAME");
}

fn args_error(v: serde_json::Value) -> String {
    parse_args::<SearchArgs>("search", &v)
        .unwrap_err()
        .to_string()
}

#[test]
fn invalid_args_missing_field() {
    assert_eq!(
        args_error(json!({"tags": []})),
        "invalid arguments for tool \"search\": missing field `query`"
    );
    assert_eq!(
        args_error(json!({"query": "q", "tags": [], "paging": {}})),
        "invalid arguments for tool \"search\": at `paging`: missing field `limit`"
    );
}

#[test]
fn invalid_args_wrong_type() {
    assert_eq!(
        args_error(json!({"query": 7, "tags": []})),
        "invalid arguments for tool \"search\": at `query`: invalid type: integer `7`, expected a string"
    );
    assert_eq!(
        args_error(json!({"query": "q", "tags": ["a", 1]})),
        "invalid arguments for tool \"search\": at `tags[1]`: invalid type: integer `1`, expected a string"
    );
    assert_eq!(
        args_error(json!({"query": "q", "tags": [], "paging": {"limit": -1}})),
        "invalid arguments for tool \"search\": at `paging.limit`: invalid value: integer `-1`, expected u32"
    );
    assert_eq!(
        args_error(json!({"query": "q", "tags": [], "paging": {"limit": 1, "order": "up"}})),
        "invalid arguments for tool \"search\": at `paging.order`: unknown variant `up`, expected `asc` or `desc`"
    );
}

#[test]
fn invalid_args_unknown_field() {
    assert_eq!(
        args_error(json!({"query": "q", "tags": [], "colour": "red"})),
        "invalid arguments for tool \"search\": at `colour`: unknown field `colour`, expected one of `query`, `paging`, `tags`, `case_sensitive`"
    );
}

#[test]
fn invalid_args_invalid_json_from_model() {
    // The scheduler passes unparseable argument text through as a JSON string.
    let raw = dsh_tools::scheduler::parse_arguments("{\"query\": \"q\"");
    assert_eq!(raw, json!("{\"query\": \"q\""));
    assert_eq!(
        args_error(raw),
        "invalid arguments for tool \"search\": the arguments are not valid JSON (EOF while parsing an object at line 1 column 13)"
    );
    assert_eq!(dsh_tools::scheduler::parse_arguments(""), json!({}));
    // A JSON string literal keeps its quotes, so it stays distinguishable from non-JSON text.
    assert_eq!(
        dsh_tools::scheduler::parse_arguments("\"ls -la\""),
        json!("\"ls -la\"")
    );
    assert_eq!(
        parse_args::<SearchArgs>("search", &json!({"tags": []}))
            .unwrap_err()
            .code(),
        "INVALID_ARGS"
    );
}

#[test]
fn validator_names_the_path() {
    let s = schema::generate_schema::<SearchArgs>("search").unwrap();
    assert_eq!(
        schema::validate(&s, &json!({"query": "q", "tags": []})),
        Ok(())
    );
    assert_eq!(
        schema::validate(&s, &json!({"query": "q", "tags": [1]})),
        Err("at `tags.0`: expected string, got integer".to_owned())
    );
    assert_eq!(
        schema::validate(&s, &json!({"query": "q", "tags": [], "x": 1})),
        Err("at the top level: unknown field `x`".to_owned())
    );
    assert_eq!(
        schema::validate(&s, &json!({"tags": []})),
        Err("at the top level: missing field `query`".to_owned())
    );
    assert_eq!(
        schema::validate(
            &s,
            &json!({"query": "q", "tags": [], "paging": {"limit": 1, "order": "up"}})
        ),
        Err(
            "at `paging.order`: expected exactly one `oneOf` branch to match, 0 matched".to_owned()
        )
    );
}
