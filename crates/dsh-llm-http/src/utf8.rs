//! Lossy, incremental UTF-8 repair of the provider's byte stream: every invalid sequence becomes
//! U+FFFD (as `String::from_utf8_lossy` would do on the whole body), sequences split across
//! network reads are carried over, and the number of replacements is counted so the adapter can
//! warn once per response. See docs/upstream/deepseek.md (Invalid UTF-8); every HTTP provider
//! plugin uses it.

use bytes::Bytes;

/// The UTF-8 encoding of U+FFFD REPLACEMENT CHARACTER.
const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();

/// The decoder state of one response body.
#[derive(Debug, Default)]
pub struct Utf8Repair {
    /// The incomplete sequence at the end of the previous read (at most 3 bytes).
    carry: Vec<u8>,
    /// Replacement characters written so far.
    replaced: u64,
}

impl Utf8Repair {
    /// Replacement characters written so far.
    pub fn replaced(&self) -> u64 {
        self.replaced
    }

    /// The valid UTF-8 of `read`, prefixed by the carried-over bytes; an incomplete sequence at
    /// its end is kept for the next read. A read that is valid on its own is returned as is.
    pub fn push(&mut self, read: Bytes) -> Bytes {
        if self.carry.is_empty() && std::str::from_utf8(&read).is_ok() {
            return read;
        }
        let mut input = std::mem::take(&mut self.carry);
        input.extend_from_slice(&read);
        let mut out = Vec::with_capacity(input.len() + 2);
        let mut rest = input.as_slice();
        loop {
            match std::str::from_utf8(rest) {
                Ok(_) => {
                    out.extend_from_slice(rest);
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    out.extend_from_slice(valid);
                    match e.error_len() {
                        Some(n) => {
                            out.extend_from_slice(REPLACEMENT);
                            self.replaced += 1;
                            rest = tail.get(n..).unwrap_or_default();
                        }
                        None => {
                            // an incomplete sequence at the end: wait for the next read
                            self.carry = tail.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        Bytes::from(out)
    }

    /// The end of the body: a carried incomplete sequence becomes one U+FFFD.
    pub fn finish(&mut self) -> Option<Bytes> {
        if self.carry.is_empty() {
            return None;
        }
        self.carry.clear();
        self.replaced += 1;
        Some(Bytes::from_static(REPLACEMENT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(reads: &[&[u8]]) -> (String, u64) {
        let mut d = Utf8Repair::default();
        let mut out = Vec::new();
        for r in reads {
            out.extend_from_slice(&d.push(Bytes::copy_from_slice(r)));
        }
        if let Some(t) = d.finish() {
            out.extend_from_slice(&t);
        }
        (String::from_utf8(out).unwrap_or_default(), d.replaced())
    }

    #[test]
    fn invalid_bytes_become_replacement_characters_and_split_sequences_survive() {
        assert_eq!(run(&[b"ab", b"c"]), ("abc".to_owned(), 0));
        assert_eq!(run(&[b"a\xffb"]), ("a\u{FFFD}b".to_owned(), 1));
        // "é" = C3 A9 split across two reads
        assert_eq!(run(&[b"x\xc3", b"\xa9y"]), ("xéy".to_owned(), 0));
        // "€" = E2 82 AC split over three reads
        assert_eq!(run(&[b"\xe2", b"\x82", b"\xac"]), ("€".to_owned(), 0));
        // a truncated sequence at the end of the body
        assert_eq!(run(&[b"z\xe2\x82"]), ("z\u{FFFD}".to_owned(), 1));
        // a bad continuation: as String::from_utf8_lossy does
        let bytes: &[u8] = b"\xe2\x28\xa1 ok \xf0\x9f\x98";
        assert_eq!(run(&[bytes]).0, String::from_utf8_lossy(bytes).into_owned());
        for split in 1..bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(
                run(&[a, b]).0,
                String::from_utf8_lossy(bytes).into_owned(),
                "split at {split}"
            );
        }
    }
}
