//! Stable short hashes the layers share (file and key names, fingerprints, span ids): FNV-1a.
//! Not for security — the digests that must resist a guess (cache keys, approval hashes) are
//! SHA-256.

/// FNV-1a of `bytes`.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// [`fnv`] as sixteen hex digits.
pub(crate) fn fnv_hex(bytes: &[u8]) -> String {
    format!("{:016x}", fnv(bytes))
}

#[cfg(test)]
mod tests {
    #[test]
    fn fnv_is_the_published_fnv1a() {
        assert_eq!(super::fnv(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
