//! The `source_event_seqs` BLOB codec of the SQLite backend: the first seq as an unsigned LEB128
//! varint, then each following seq as a ZigZag-encoded signed delta varint.
//!
//! Behaviour: `docs/persistence.md` ("SQLite backend").

/// Encodes seqs (each ≤ 2^53-1) as first-varint + zigzag-delta varints. Empty input ⇒ empty blob.
pub fn encode_seqs(seqs: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(seqs.len() * 2);
    let mut prev: Option<u64> = None;
    for &s in seqs {
        match prev {
            None => put_varint(&mut out, s),
            Some(p) => {
                let delta = s as i64 - p as i64;
                put_varint(&mut out, ((delta << 1) ^ (delta >> 63)) as u64);
            }
        }
        prev = Some(s);
    }
    out
}

/// Decodes a blob written by [`encode_seqs`]; `None` for a truncated/overlong varint or a delta
/// leading below zero.
pub fn decode_seqs(blob: &[u8]) -> Option<Vec<u64>> {
    let mut out = Vec::new();
    let mut pos = 0;
    let mut prev: Option<u64> = None;
    while pos < blob.len() {
        let (v, used) = get_varint(&blob[pos..])?;
        pos += used;
        let seq = match prev {
            None => v,
            Some(p) => {
                let delta = ((v >> 1) as i64) ^ -((v & 1) as i64);
                u64::try_from(p as i64 + delta).ok()?
            }
        };
        out.push(seq);
        prev = Some(seq);
    }
    Some(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn get_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7F) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for seqs in [
            vec![],
            vec![0],
            vec![5, 3, 300, 299, 1 << 40],
            vec![9007199254740991, 0],
        ] {
            assert_eq!(decode_seqs(&encode_seqs(&seqs)).unwrap(), seqs);
        }
        assert_eq!(encode_seqs(&[300, 301, 299]), vec![0xAC, 0x02, 0x02, 0x03]);
        assert_eq!(decode_seqs(&[0x80]), None);
        assert_eq!(decode_seqs(&[0x00, 0x01]), None);
    }
}
