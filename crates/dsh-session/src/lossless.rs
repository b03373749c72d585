//! Lossless-JSON validation and JSON value equivalence.
//!
//! See docs/upstream/session.md (Append contract): event data must be lossless JSON —
//! no non-finite numbers, no `-0`, and (dsh rule, matching JavaScript's exact-integer range) no
//! integer outside ±(2^53−1). The check walks any `Serialize` value through a non-allocating
//! checking serializer, so typed payloads are validated without building a `serde_json::Value`.

use serde::ser::{self, Serialize};

use crate::error::SessionError;

/// The largest integer JSON can carry losslessly across dsh and upstream (2^53 − 1).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Checks that `value` serializes to lossless JSON.
///
/// # Errors
/// [`SessionError::NonLosslessData`] naming the path (`/a/0/b`) of the first offending value: a
/// NaN/±∞ float, a negative zero, or an integer outside ±(2^53−1).
pub fn check_lossless<T: Serialize + ?Sized>(value: &T) -> Result<(), SessionError> {
    value
        .serialize(Checker)
        .map_err(|e| SessionError::NonLosslessData {
            path: e.path(),
            message: e.message,
        })
}

/// True when two JSON values are equal as JSON values: objects compare by key set (order
/// ignored), arrays element-wise, numbers by numeric value (so `1` equals `1.0`).
pub fn json_equiv(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as V;
    match (a, b) {
        (V::Null, V::Null) => true,
        (V::Bool(x), V::Bool(y)) => x == y,
        (V::String(x), V::String(y)) => x == y,
        (V::Number(x), V::Number(y)) => {
            if x == y {
                return true;
            }
            match (x.as_f64(), y.as_f64()) {
                (Some(p), Some(q)) => p == q && (x.is_f64() || y.is_f64()),
                _ => false,
            }
        }
        (V::Array(x), V::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equiv(p, q))
        }
        (V::Object(x), V::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equiv(v, w)))
        }
        _ => false,
    }
}

#[derive(Debug)]
struct CheckError {
    /// Path segments, innermost first (the error path is built while the error propagates, so
    /// a successful check allocates nothing).
    rev_path: Vec<String>,
    message: String,
}

impl CheckError {
    fn at(mut self, seg: String) -> Self {
        self.rev_path.push(seg);
        self
    }
    fn path(&self) -> String {
        if self.rev_path.is_empty() {
            return "/".to_owned();
        }
        let mut s = String::new();
        for seg in self.rev_path.iter().rev() {
            s.push('/');
            s.push_str(seg);
        }
        s
    }
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}", self.message, self.path())
    }
}

impl std::error::Error for CheckError {}

impl ser::Error for CheckError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        CheckError {
            rev_path: Vec::new(),
            message: msg.to_string(),
        }
    }
}

fn fail(message: String) -> CheckError {
    CheckError {
        rev_path: Vec::new(),
        message,
    }
}

fn int_i128(v: i128) -> Result<(), CheckError> {
    if v.unsigned_abs() > u128::from(MAX_SAFE_INTEGER) {
        Err(fail(format!("integer {v} outside ±(2^53−1)")))
    } else {
        Ok(())
    }
}

fn float(v: f64) -> Result<(), CheckError> {
    if !v.is_finite() {
        Err(fail(format!("non-finite number {v}")))
    } else if v == 0.0 && v.is_sign_negative() {
        Err(fail("negative zero".to_owned()))
    } else {
        Ok(())
    }
}

struct Checker;

struct Compound {
    index: usize,
}

impl Compound {
    fn next_index<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CheckError> {
        let i = self.index;
        self.index += 1;
        v.serialize(Checker).map_err(|e| e.at(i.to_string()))
    }
}

impl ser::Serializer for Checker {
    type Ok = ();
    type Error = CheckError;
    type SerializeSeq = Compound;
    type SerializeTuple = Compound;
    type SerializeTupleStruct = Compound;
    type SerializeTupleVariant = Compound;
    type SerializeMap = Compound;
    type SerializeStruct = Compound;
    type SerializeStructVariant = Compound;

    fn serialize_bool(self, _: bool) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_i8(self, _: i8) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_i16(self, _: i16) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_i32(self, _: i32) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_i64(self, v: i64) -> Result<(), CheckError> {
        int_i128(i128::from(v))
    }
    fn serialize_i128(self, v: i128) -> Result<(), CheckError> {
        int_i128(v)
    }
    fn serialize_u8(self, _: u8) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_u16(self, _: u16) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_u32(self, _: u32) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_u64(self, v: u64) -> Result<(), CheckError> {
        int_i128(i128::from(v))
    }
    fn serialize_u128(self, v: u128) -> Result<(), CheckError> {
        if v > u128::from(MAX_SAFE_INTEGER) {
            Err(fail(format!("integer {v} outside ±(2^53−1)")))
        } else {
            Ok(())
        }
    }
    fn serialize_f32(self, v: f32) -> Result<(), CheckError> {
        float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Result<(), CheckError> {
        float(v)
    }
    fn serialize_char(self, _: char) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_str(self, _: &str) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_none(self) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, v: &T) -> Result<(), CheckError> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<(), CheckError> {
        Ok(())
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), CheckError> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), CheckError> {
        v.serialize(Checker).map_err(|e| e.at(variant.to_owned()))
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Compound, CheckError> {
        Ok(Compound { index: 0 })
    }
    fn serialize_tuple(self, _: usize) -> Result<Compound, CheckError> {
        Ok(Compound { index: 0 })
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Compound, CheckError> {
        Ok(Compound { index: 0 })
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound, CheckError> {
        Ok(Compound { index: 0 })
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Compound, CheckError> {
        Ok(Compound { index: 0 })
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Compound, CheckError> {
        Ok(Compound { index: 0 })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Compound, CheckError> {
        Ok(Compound { index: 0 })
    }
}

impl ser::SerializeSeq for Compound {
    type Ok = ();
    type Error = CheckError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CheckError> {
        self.next_index(v)
    }
    fn end(self) -> Result<(), CheckError> {
        Ok(())
    }
}

impl ser::SerializeTuple for Compound {
    type Ok = ();
    type Error = CheckError;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CheckError> {
        self.next_index(v)
    }
    fn end(self) -> Result<(), CheckError> {
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Compound {
    type Ok = ();
    type Error = CheckError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CheckError> {
        self.next_index(v)
    }
    fn end(self) -> Result<(), CheckError> {
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Compound {
    type Ok = ();
    type Error = CheckError;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CheckError> {
        self.next_index(v)
    }
    fn end(self) -> Result<(), CheckError> {
        Ok(())
    }
}

impl ser::SerializeMap for Compound {
    type Ok = ();
    type Error = CheckError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, _: &T) -> Result<(), CheckError> {
        // JSON keys are strings; nothing to check.
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), CheckError> {
        self.next_index(v)
    }
    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        v: &V,
    ) -> Result<(), CheckError> {
        v.serialize(Checker).map_err(|e| {
            let name = serde_json::to_value(key)
                .ok()
                .and_then(|k| k.as_str().map(str::to_owned))
                .unwrap_or_default();
            e.at(name)
        })
    }
    fn end(self) -> Result<(), CheckError> {
        Ok(())
    }
}

impl ser::SerializeStruct for Compound {
    type Ok = ();
    type Error = CheckError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), CheckError> {
        v.serialize(Checker).map_err(|e| e.at(key.to_owned()))
    }
    fn end(self) -> Result<(), CheckError> {
        Ok(())
    }
}

impl ser::SerializeStructVariant for Compound {
    type Ok = ();
    type Error = CheckError;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), CheckError> {
        v.serialize(Checker).map_err(|e| e.at(key.to_owned()))
    }
    fn end(self) -> Result<(), CheckError> {
        Ok(())
    }
}

/// The part of a stored JSON value that its typed (modeled) form does not reproduce: what has to
/// be applied to the typed form's JSON to get the stored value back. Kept beside a parsed event
/// whose stored payload has fields dsh does not model (`SessionEvent::residual`), so the event
/// re-serializes to the stored JSON unchanged. See docs/formats.md (Fields dsh does not model).
///
/// It holds only the differences (the unmodeled keys and their values), never a second copy of
/// the modeled payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Residual {
    /// Replace the value by this one (a shape the typed form renders differently).
    Value(serde_json::Value),
    /// Edits of an object, key by key.
    Object(Vec<ObjectEdit>),
    /// Edits of an array of the same length, by index.
    Array(Vec<(usize, Residual)>),
}

/// One key's edit inside [`Residual::Object`].
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectEdit {
    /// The stored object has `key` (at position `index` of its keys) and the typed form does
    /// not: insert it with this value.
    Insert {
        /// The key.
        key: String,
        /// Its position among the stored object's keys (the insert position on re-write).
        index: usize,
        /// The stored value.
        value: serde_json::Value,
    },
    /// Both have `key` and the values differ: apply the nested residual.
    Patch {
        /// The key.
        key: String,
        /// What to change inside its value.
        residual: Residual,
    },
    /// The typed form writes `key` (a default) and the stored object does not: remove it.
    Remove {
        /// The key.
        key: String,
    },
}

impl Residual {
    /// The residual turning `typed` into `stored`, or `None` when they are already equal as
    /// JSON values ([`json_equiv`]).
    pub fn between(typed: &serde_json::Value, stored: &serde_json::Value) -> Option<Residual> {
        use serde_json::Value as V;
        if json_equiv(typed, stored) {
            return None;
        }
        Some(match (typed, stored) {
            (V::Object(t), V::Object(s)) => {
                let mut edits = Vec::new();
                for (index, (key, sv)) in s.iter().enumerate() {
                    match t.get(key) {
                        None => edits.push(ObjectEdit::Insert {
                            key: key.clone(),
                            index,
                            value: sv.clone(),
                        }),
                        Some(tv) => {
                            if let Some(residual) = Residual::between(tv, sv) {
                                edits.push(ObjectEdit::Patch {
                                    key: key.clone(),
                                    residual,
                                });
                            }
                        }
                    }
                }
                for key in t.keys() {
                    if !s.contains_key(key) {
                        edits.push(ObjectEdit::Remove { key: key.clone() });
                    }
                }
                Residual::Object(edits)
            }
            (V::Array(t), V::Array(s)) if t.len() == s.len() => Residual::Array(
                t.iter()
                    .zip(s)
                    .enumerate()
                    .filter_map(|(i, (tv, sv))| Residual::between(tv, sv).map(|r| (i, r)))
                    .collect(),
            ),
            _ => Residual::Value(stored.clone()),
        })
    }

    /// Applies the residual to `value` (the typed form's JSON) in place. Edits whose place does
    /// not exist (a residual applied to another value) are skipped.
    pub fn apply(&self, value: &mut serde_json::Value) {
        use serde_json::Value as V;
        match (self, value) {
            (Residual::Value(v), target) => *target = v.clone(),
            (Residual::Object(edits), V::Object(map)) => {
                for edit in edits {
                    match edit {
                        ObjectEdit::Insert { key, index, value } => {
                            let at = (*index).min(map.len());
                            map.shift_insert(at, key.clone(), value.clone());
                        }
                        ObjectEdit::Patch { key, residual } => {
                            if let Some(v) = map.get_mut(key) {
                                residual.apply(v);
                            }
                        }
                        ObjectEdit::Remove { key } => {
                            map.shift_remove(key);
                        }
                    }
                }
            }
            (Residual::Array(edits), V::Array(items)) => {
                for (i, residual) in edits {
                    if let Some(v) = items.get_mut(*i) {
                        residual.apply(v);
                    }
                }
            }
            _ => {}
        }
    }

    /// Checks that every value the residual carries is lossless JSON (as [`check_lossless`]).
    ///
    /// # Errors
    /// [`SessionError::NonLosslessData`] naming the carried key's path.
    pub fn check_lossless(&self) -> Result<(), SessionError> {
        match self {
            Residual::Value(v) => check_lossless(v),
            Residual::Object(edits) => edits.iter().try_for_each(|e| match e {
                ObjectEdit::Insert { key, value, .. } => {
                    check_lossless(value).map_err(|err| prefix(err, key))
                }
                ObjectEdit::Patch { key, residual } => {
                    residual.check_lossless().map_err(|err| prefix(err, key))
                }
                ObjectEdit::Remove { .. } => Ok(()),
            }),
            Residual::Array(edits) => edits.iter().try_for_each(|(i, r)| {
                r.check_lossless()
                    .map_err(|err| prefix(err, &i.to_string()))
            }),
        }
    }
}

fn prefix(err: SessionError, seg: &str) -> SessionError {
    match err {
        SessionError::NonLosslessData { path, message } => SessionError::NonLosslessData {
            path: if path == "/" {
                format!("/{seg}")
            } else {
                format!("/{seg}{path}")
            },
            message,
        },
        other => other,
    }
}

#[cfg(test)]
mod residual_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn residual_inserts_patches_and_removes_in_place() {
        let typed = json!({"a": 1, "b": {"c": [1, {"d": 2}]}, "dflt": false});
        let stored = json!({"x": true, "a": 1, "b": {"c": [1, {"d": 2, "e": "new"}], "f": null}});
        let r = Residual::between(&typed, &stored).unwrap();
        assert_eq!(
            r,
            Residual::Object(vec![
                ObjectEdit::Insert {
                    key: "x".into(),
                    index: 0,
                    value: json!(true)
                },
                ObjectEdit::Patch {
                    key: "b".into(),
                    residual: Residual::Object(vec![
                        ObjectEdit::Patch {
                            key: "c".into(),
                            residual: Residual::Array(vec![(
                                1,
                                Residual::Object(vec![ObjectEdit::Insert {
                                    key: "e".into(),
                                    index: 1,
                                    value: json!("new")
                                }])
                            )])
                        },
                        ObjectEdit::Insert {
                            key: "f".into(),
                            index: 1,
                            value: json!(null)
                        },
                    ])
                },
                ObjectEdit::Remove { key: "dflt".into() },
            ])
        );
        let mut back = typed.clone();
        r.apply(&mut back);
        // Equal, and in the stored key order.
        assert_eq!(back.to_string(), stored.to_string());
        assert_eq!(Residual::between(&typed, &typed), None);
        // Arrays of another length and other shapes are replaced whole.
        assert_eq!(
            Residual::between(&json!([1]), &json!([1, 2])),
            Some(Residual::Value(json!([1, 2])))
        );
        assert_eq!(
            Residual::between(&json!("s"), &json!({"k": 1})),
            Some(Residual::Value(json!({"k": 1})))
        );
    }

    #[test]
    fn residual_lossless_check_names_the_carried_path() {
        let r = Residual::between(
            &json!({"a": {"b": 1}}),
            &json!({"a": {"b": 1, "big": 9_007_199_254_740_993u64}}),
        )
        .unwrap();
        match r.check_lossless() {
            Err(SessionError::NonLosslessData { path, .. }) => assert_eq!(path, "/a/big"),
            other => panic!("expected NON_LOSSLESS_DATA, got {other:?}"),
        }
    }
}
