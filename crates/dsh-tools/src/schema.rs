//! JSON-Schema for tool parameters and outputs: generation from Rust types (schemars 1.x),
//! normalisation to the enforced subset, the subset check, and a small validator.
//!
//! Behaviour notes: `docs/tools.md` ("ToolDefinition": the enforced JSON-Schema subset).
//!
//! # The enforced subset
//! Structural keywords: `type`, `oneOf` (≥ 2 branches, exactly one must match), `properties`,
//! `required`, `additionalProperties` (boolean only), `items`, `enum`, `const`. Annotations:
//! `title`, `description`, `default`, `examples`, `deprecated`, `readOnly`, `writeOnly`. Anything
//! else is rejected with [`ToolsError::UnsupportedSchema`] (`UNSUPPORTED_SCHEMA`).
//!
//! # Mapping of schemars output ([`generate_schema`])
//! | schemars produces | sent to the model |
//! |---|---|
//! | `$schema` | dropped |
//! | root `title` (the Rust type name) | dropped |
//! | `$ref` + `$defs` (nested structs/enums) | inlined; a recursive type ⇒ `UNSUPPORTED_SCHEMA` |
//! | `Option<T>` field: `T` schema (no `null`), field not in `required` | kept as is |
//! | `type: ["T", "null"]` / `anyOf: [X, {type: null}]` (e.g. `Option<T>` inside a `Vec`) | `T` / `X` (null dropped; explicit `null` arguments are refused by the validator but accepted by serde for `Option`) |
//! | `format`, `minimum`, `maximum` schemars adds for integer/float widths | dropped (range is enforced by deserialisation ⇒ `INVALID_ARGS`) |
//! | unit-variant enum: `{type: string, enum: [...]}` | kept |
//! | data-carrying enum: `oneOf: [...]` | kept (each branch must be distinguishable) |
//! | single-element `allOf: [X]` (doc comment on a `$ref` field) | merged into the node |
//! | `anyOf` (untagged enums) | `UNSUPPORTED_SCHEMA` |
//! | `additionalProperties: <schema>` (maps), `uniqueItems` (sets), `minItems`/`maxItems` (tuples/arrays) | `UNSUPPORTED_SCHEMA` |

use serde_json::{Map, Value};

use crate::error::ToolsError;

/// Structural keywords of the enforced subset.
pub const STRUCTURAL_KEYWORDS: &[&str] = &[
    "type",
    "oneOf",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
];

/// Annotation keywords accepted (and passed to the model unchanged).
pub const ANNOTATION_KEYWORDS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Generates the model-facing schema of `T` (schemars 1.x, draft 2020-12, deserialize contract)
/// and normalises it to the enforced subset (see the module docs for the mapping).
///
/// # Errors
/// [`ToolsError::UnsupportedSchema`] (naming `tool` and the JSON pointer) if the type needs a
/// keyword outside the subset after normalisation, or is recursive.
pub fn generate_schema<T: schemars::JsonSchema + ?Sized>(tool: &str) -> Result<Value, ToolsError> {
    let settings = schemars::generate::SchemaSettings::draft2020_12().with(|s| {
        s.meta_schema = None;
        s.inline_subschemas = false;
    });
    let generator = settings.for_deserialize().into_generator();
    let root = generator.into_root_schema_for::<T>().to_value();
    normalize_root(tool, root)
}

/// Normalises a schemars-style root schema: inlines `$defs`, drops `$schema`, the root `title`,
/// numeric `format`/`minimum`/`maximum`, null branches; then checks the subset.
///
/// # Errors
/// [`ToolsError::UnsupportedSchema`] as for [`generate_schema`].
pub fn normalize_root(tool: &str, mut root: Value) -> Result<Value, ToolsError> {
    let defs = match root.as_object_mut() {
        Some(obj) => {
            obj.remove("$schema");
            obj.remove("title");
            let mut defs = Map::new();
            for key in ["$defs", "definitions"] {
                if let Some(Value::Object(d)) = obj.remove(key) {
                    defs.extend(d);
                }
            }
            defs
        }
        None => Map::new(),
    };
    let mut stack = Vec::new();
    let out = normalize_node(tool, "", root, &defs, &mut stack)?;
    check_subset(tool, &out)?;
    Ok(out)
}

fn unsupported(tool: &str, path: &str, reason: impl Into<String>) -> ToolsError {
    ToolsError::UnsupportedSchema {
        tool: tool.to_owned(),
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn is_null_schema(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("null")
        && v.as_object().is_some_and(|o| o.len() == 1)
}

fn normalize_node(
    tool: &str,
    path: &str,
    node: Value,
    defs: &Map<String, Value>,
    stack: &mut Vec<String>,
) -> Result<Value, ToolsError> {
    let mut obj = match node {
        Value::Object(o) => o,
        Value::Bool(true) => return Ok(Value::Object(Map::new())),
        other => {
            return Err(unsupported(
                tool,
                path,
                format!("schema node must be an object, got {other}"),
            ));
        }
    };
    // Resolve `$ref` by inlining the definition (siblings such as `description` win).
    if let Some(r) = obj.remove("$ref") {
        let Some(r) = r.as_str() else {
            return Err(unsupported(tool, path, "`$ref` must be a string"));
        };
        if r == "#" {
            return Err(unsupported(
                tool,
                path,
                "recursive type (`$ref: #`) cannot be inlined",
            ));
        }
        let name = r
            .strip_prefix("#/$defs/")
            .or_else(|| r.strip_prefix("#/definitions/"))
            .ok_or_else(|| unsupported(tool, path, format!("external `$ref` {r}")))?;
        if stack.iter().any(|s| s == name) {
            return Err(unsupported(
                tool,
                path,
                format!("recursive type `{name}` cannot be inlined"),
            ));
        }
        let def = defs
            .get(name)
            .cloned()
            .ok_or_else(|| unsupported(tool, path, format!("unresolved `$ref` {r}")))?;
        stack.push(name.to_owned());
        let inlined = normalize_node(tool, path, def, defs, stack)?;
        stack.pop();
        let mut merged = match inlined {
            Value::Object(o) => o,
            _ => Map::new(),
        };
        merged.remove("title");
        for (k, v) in obj {
            merged.insert(k, v);
        }
        return normalize_node(tool, path, Value::Object(merged), defs, stack);
    }
    // Single-element allOf: merge.
    if let Some(all) = obj.remove("allOf") {
        match all {
            Value::Array(mut items) if items.len() == 1 => {
                let inner = normalize_node(tool, path, items.remove(0), defs, stack)?;
                if let Value::Object(inner) = inner {
                    for (k, v) in inner {
                        obj.entry(k).or_insert(v);
                    }
                }
            }
            _ => return Err(unsupported(tool, path, "`allOf` is not supported")),
        }
    }
    // anyOf with exactly one null branch: drop the null.
    if let Some(any) = obj.remove("anyOf") {
        match any {
            Value::Array(items) => {
                let non_null: Vec<Value> =
                    items.into_iter().filter(|v| !is_null_schema(v)).collect();
                if non_null.len() == 1 {
                    let inner = normalize_node(
                        tool,
                        path,
                        non_null.into_iter().next().unwrap_or_default(),
                        defs,
                        stack,
                    )?;
                    if let Value::Object(inner) = inner {
                        for (k, v) in inner {
                            obj.entry(k).or_insert(v);
                        }
                    }
                } else {
                    return Err(unsupported(
                        tool,
                        path,
                        "`anyOf` is not supported (use an internally/externally tagged enum: oneOf)",
                    ));
                }
            }
            _ => return Err(unsupported(tool, path, "`anyOf` must be an array")),
        }
    }
    // type: ["T", "null"] ⇒ "T".
    if let Some(Value::Array(types)) = obj.get("type") {
        let non_null: Vec<Value> = types
            .iter()
            .filter(|t| t.as_str() != Some("null"))
            .cloned()
            .collect();
        if non_null.len() == 1 {
            obj.insert(
                "type".into(),
                non_null.into_iter().next().unwrap_or_default(),
            );
        }
    }
    // `enum` containing null (Option<UnitEnum>): drop the null.
    if let Some(Value::Array(vals)) = obj.get_mut("enum") {
        vals.retain(|v| !v.is_null());
    }
    // Numeric width hints schemars adds.
    let numeric = matches!(
        obj.get("type").and_then(Value::as_str),
        Some("integer" | "number")
    );
    if numeric {
        obj.remove("format");
        obj.remove("minimum");
        obj.remove("maximum");
    }
    // Recurse into subschemas.
    if let Some(Value::Object(props)) = obj.remove("properties") {
        let mut out = Map::new();
        for (k, v) in props {
            let p = format!("{path}/properties/{k}");
            out.insert(k, normalize_node(tool, &p, v, defs, stack)?);
        }
        obj.insert("properties".into(), Value::Object(out));
    }
    if let Some(items) = obj.remove("items") {
        let p = format!("{path}/items");
        obj.insert(
            "items".into(),
            normalize_node(tool, &p, items, defs, stack)?,
        );
    }
    if let Some(Value::Array(branches)) = obj.remove("oneOf") {
        let mut out = Vec::with_capacity(branches.len());
        for (i, b) in branches.into_iter().enumerate() {
            let p = format!("{path}/oneOf/{i}");
            out.push(normalize_node(tool, &p, b, defs, stack)?);
        }
        obj.insert("oneOf".into(), Value::Array(out));
    }
    Ok(Value::Object(obj))
}

/// Checks that `schema` uses only the enforced subset (see module docs).
///
/// # Errors
/// [`ToolsError::UnsupportedSchema`] naming the first offending JSON pointer and keyword.
pub fn check_subset(tool: &str, schema: &Value) -> Result<(), ToolsError> {
    check_node(tool, "", schema)
}

fn check_node(tool: &str, path: &str, node: &Value) -> Result<(), ToolsError> {
    let obj = match node {
        Value::Object(o) => o,
        Value::Bool(true) => return Ok(()),
        _ => return Err(unsupported(tool, path, "schema node must be an object")),
    };
    for (k, v) in obj {
        let p = format!("{path}/{k}");
        match k.as_str() {
            "type" => {
                let ok = match v {
                    Value::String(s) => is_type_name(s),
                    Value::Array(a) => {
                        !a.is_empty() && a.iter().all(|t| t.as_str().is_some_and(is_type_name))
                    }
                    _ => false,
                };
                if !ok {
                    return Err(unsupported(tool, &p, "`type` must name JSON types"));
                }
            }
            "oneOf" => {
                let Value::Array(branches) = v else {
                    return Err(unsupported(tool, &p, "`oneOf` must be an array"));
                };
                if branches.len() < 2 {
                    return Err(unsupported(tool, &p, "`oneOf` needs at least 2 branches"));
                }
                for (i, b) in branches.iter().enumerate() {
                    check_node(tool, &format!("{p}/{i}"), b)?;
                }
            }
            "properties" => {
                let Value::Object(props) = v else {
                    return Err(unsupported(tool, &p, "`properties` must be an object"));
                };
                for (name, s) in props {
                    check_node(tool, &format!("{p}/{name}"), s)?;
                }
            }
            "required" => {
                let ok = v.as_array().is_some_and(|a| a.iter().all(Value::is_string));
                if !ok {
                    return Err(unsupported(
                        tool,
                        &p,
                        "`required` must be an array of strings",
                    ));
                }
            }
            "additionalProperties" => {
                if !v.is_boolean() {
                    return Err(unsupported(
                        tool,
                        &p,
                        "`additionalProperties` must be a boolean (maps are not supported)",
                    ));
                }
            }
            "items" => check_node(tool, &p, v)?,
            "enum" => {
                if !v.is_array() {
                    return Err(unsupported(tool, &p, "`enum` must be an array"));
                }
            }
            "const" => {}
            a if ANNOTATION_KEYWORDS.contains(&a) => {}
            other => {
                return Err(unsupported(
                    tool,
                    path,
                    format!("keyword `{other}` is not supported"),
                ));
            }
        }
    }
    Ok(())
}

fn is_type_name(s: &str) -> bool {
    matches!(
        s,
        "object" | "array" | "string" | "number" | "integer" | "boolean" | "null"
    )
}

/// Validates `value` against a subset schema. Returns the first mismatch as
/// `at `<dotted.path>`: <what>` (root: `at the top level: …`).
///
/// # Errors
/// A human-readable message naming the JSON path of the first mismatch.
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    validate_at(schema, value, &mut Vec::new())
}

fn describe_path(path: &[String]) -> String {
    if path.is_empty() {
        "at the top level".to_owned()
    } else {
        format!("at `{}`", path.join("."))
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        other => json_type(v) == other,
    }
}

fn validate_at(schema: &Value, value: &Value, path: &mut Vec<String>) -> Result<(), String> {
    let Some(obj) = schema.as_object() else {
        return Ok(());
    };
    if let Some(t) = obj.get("type") {
        let ok = match t {
            Value::String(s) => type_matches(s, value),
            Value::Array(a) => a
                .iter()
                .filter_map(Value::as_str)
                .any(|s| type_matches(s, value)),
            _ => true,
        };
        if !ok {
            return Err(format!(
                "{}: expected {}, got {}",
                describe_path(path),
                match t {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
                json_type(value)
            ));
        }
    }
    if let Some(Value::Array(vals)) = obj.get("enum")
        && !vals.contains(value)
    {
        return Err(format!(
            "{}: expected one of {}, got {}",
            describe_path(path),
            Value::Array(vals.clone()),
            value
        ));
    }
    if let Some(c) = obj.get("const")
        && c != value
    {
        return Err(format!(
            "{}: expected {}, got {}",
            describe_path(path),
            c,
            value
        ));
    }
    if let Value::Object(map) = value {
        if let Some(Value::Array(req)) = obj.get("required") {
            for r in req.iter().filter_map(Value::as_str) {
                if !map.contains_key(r) {
                    return Err(format!("{}: missing field `{r}`", describe_path(path)));
                }
            }
        }
        let props = obj.get("properties").and_then(Value::as_object);
        for (k, v) in map {
            match props.and_then(|p| p.get(k)) {
                Some(s) => {
                    path.push(k.clone());
                    validate_at(s, v, path)?;
                    path.pop();
                }
                None => {
                    if obj.get("additionalProperties") == Some(&Value::Bool(false)) {
                        return Err(format!("{}: unknown field `{k}`", describe_path(path)));
                    }
                }
            }
        }
    }
    if let (Value::Array(items), Some(item_schema)) = (value, obj.get("items")) {
        for (i, v) in items.iter().enumerate() {
            path.push(i.to_string());
            validate_at(item_schema, v, path)?;
            path.pop();
        }
    }
    if let Some(Value::Array(branches)) = obj.get("oneOf") {
        let matching = branches
            .iter()
            .filter(|b| validate_at(b, value, &mut path.clone()).is_ok())
            .count();
        if matching != 1 {
            return Err(format!(
                "{}: expected exactly one `oneOf` branch to match, {matching} matched",
                describe_path(path)
            ));
        }
    }
    Ok(())
}
