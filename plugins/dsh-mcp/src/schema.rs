//! An MCP tool's `inputSchema` reduced to the JSON-Schema subset dsh sends to models
//! (docs/tools.md, "ToolDefinition"): keywords outside it are dropped (the server still
//! validates its own arguments), so any server's tools can be registered.
//! See docs/upstream/mcp.md ("Schemas").

use serde_json::{Map, Value};

use dsh_tools::schema::{ANNOTATION_KEYWORDS, STRUCTURAL_KEYWORDS};

fn reduce(node: &Value) -> Value {
    let Value::Object(map) = node else {
        return Value::Object(Map::new());
    };
    // `anyOf: [X, {type: null}]` (an optional value) is X.
    if let Some(Value::Array(any)) = map.get("anyOf") {
        let non_null: Vec<&Value> = any
            .iter()
            .filter(|v| v.get("type").and_then(Value::as_str) != Some("null"))
            .collect();
        if non_null.len() == 1 {
            let mut merged = reduce(non_null[0]);
            if let (Value::Object(m), Some(d)) = (&mut merged, map.get("description")) {
                m.entry("description").or_insert(d.clone());
            }
            return merged;
        }
    }
    let mut out = Map::new();
    for (k, v) in map {
        match k.as_str() {
            "type" => match v {
                Value::String(_) => {
                    out.insert(k.clone(), v.clone());
                }
                Value::Array(types) => {
                    let t: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                    if t.len() == 1 {
                        out.insert(k.clone(), t[0].clone());
                    }
                }
                _ => {}
            },
            "properties" => {
                if let Value::Object(props) = v {
                    let p: Map<String, Value> =
                        props.iter().map(|(n, s)| (n.clone(), reduce(s))).collect();
                    out.insert(k.clone(), Value::Object(p));
                }
            }
            "items" => {
                out.insert(k.clone(), reduce(v));
            }
            "additionalProperties" if v.is_boolean() => {
                out.insert(k.clone(), v.clone());
            }
            "oneOf" => {
                if let Value::Array(branches) = v
                    && branches.len() >= 2
                {
                    out.insert(
                        k.clone(),
                        Value::Array(branches.iter().map(reduce).collect()),
                    );
                }
            }
            "required" | "enum" | "const" => {
                out.insert(k.clone(), v.clone());
            }
            a if ANNOTATION_KEYWORDS.contains(&a) => {
                out.insert(k.clone(), v.clone());
            }
            s if STRUCTURAL_KEYWORDS.contains(&s) => {}
            _ => {}
        }
    }
    // `required` naming properties that are not declared is dropped with them.
    if let (Some(Value::Array(req)), Some(Value::Object(props))) =
        (out.get("required").cloned(), out.get("properties"))
    {
        let kept: Vec<Value> = req
            .into_iter()
            .filter(|r| r.as_str().is_some_and(|n| props.contains_key(n)))
            .collect();
        out.insert("required".into(), Value::Array(kept));
    }
    Value::Object(out)
}

/// The model-facing parameters of an MCP tool: `input_schema` reduced to the subset, an object
/// at the root (`{"type":"object"}` when the server sent none).
pub fn parameters(input_schema: &Value) -> Value {
    let mut root = reduce(input_schema);
    if let Value::Object(m) = &mut root {
        m.insert("type".into(), Value::String("object".into()));
        m.entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
    }
    root
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unsupported_keywords_are_dropped() {
        let got = parameters(&json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "a": {"type": "number", "minimum": 0, "description": "A"},
                "b": {"anyOf": [{"type": "string", "format": "uri"}, {"type": "null"}]},
                "c": {"type": "object", "additionalProperties": {"type": "string"}},
                "d": {"type": ["integer", "null"]}
            },
            "required": ["a", "zz"],
            "additionalProperties": false
        }));
        assert_eq!(
            got,
            json!({
                "type": "object",
                "properties": {
                    "a": {"type": "number", "description": "A"},
                    "b": {"type": "string"},
                    "c": {"type": "object"},
                    "d": {"type": "integer"}
                },
                "required": ["a"],
                "additionalProperties": false
            })
        );
        dsh_tools::schema::check_subset("t", &got).unwrap();
        assert_eq!(
            parameters(&json!({})),
            json!({"type": "object", "properties": {}})
        );
    }
}
