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
