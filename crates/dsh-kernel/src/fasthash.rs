//! A fast, non-cryptographic hasher for the kernel's internal lookup tables (listener slots keyed
//! by `TypeId`, services keyed by `(TypeId, name)`), which are read on every dispatch and
//! service lookup. The keys are chosen by linked code, never by untrusted input, so the
//! HashDoS resistance of the default SipHash buys nothing there while costing ≈ 150
//! instructions per lookup. Multiply-and-rotate in the style of rustc's `FxHasher`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Odd multiplier with well-spread bits (the constant of rustc-hash 2).
const K: u64 = 0xf135_7aea_2e62_a9c5;

/// The hasher state (one 64-bit word).
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = self.0.wrapping_add(word).wrapping_mul(K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
        // Length-dependent tail so "a" and "a\0" differ.
        self.add(bytes.len() as u64);
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_u128(&mut self, n: u128) {
        // Truncations are intended: both halves are mixed in.
        self.add(n as u64);
        self.add((n >> 64) as u64);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // The multiply leaves its best-mixed bits at the top; hashbrown indexes buckets with
        // the low bits, so rotate them down.
        self.0.rotate_left(26)
    }
}

/// A `HashMap` using [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn h<T: Hash>(t: &T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(t)
    }

    #[test]
    fn distinguishes_keys() {
        assert_ne!(h(&"a"), h(&"a\0"));
        assert_ne!(h(&"ab"), h(&"ba"));
        assert_ne!(
            h(&(std::any::TypeId::of::<u8>(), None::<String>)),
            h(&(std::any::TypeId::of::<u16>(), None::<String>))
        );
        assert_ne!(
            h(&(std::any::TypeId::of::<u8>(), Some("x".to_owned()))),
            h(&(std::any::TypeId::of::<u8>(), None::<String>))
        );
    }

    #[test]
    fn map_round_trips() {
        let mut m: FastMap<String, usize> = FastMap::default();
        for i in 0..1000 {
            m.insert(format!("k{i}"), i);
        }
        assert_eq!(m.len(), 1000);
        assert_eq!(m.get("k517"), Some(&517));
        assert_eq!(m.get("k1000"), None);
    }
}
