//! What message `i` of a run is: its dedup id, its payload and the payload's checksum.
//!
//! Everything is regenerated from (seed, index), so neither the publisher nor the reader
//! keeps anything per message.

use rand::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use sha2::{Digest, Sha256};

/// Header carrying the hex sha256 of the payload.
pub const CHECKSUM_HEADER: &str = "Workload-Sha256";
/// The standard JetStream dedup header.
pub const MSG_ID_HEADER: &str = "Nats-Msg-Id";

/// The messages of one run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunMessages {
    pub run_id: String,
    pub seed: u64,
    pub payload_size: usize,
}

impl RunMessages {
    pub fn new(run_id: impl Into<String>, seed: u64, payload_size: usize) -> Self {
        Self { run_id: run_id.into(), seed, payload_size }
    }

    /// `<run>-<index>`, the `Nats-Msg-Id` of message `index` (1-based).
    pub fn msg_id(&self, index: u64) -> String {
        format!("{}-{}", self.run_id, index)
    }

    /// The index named by a message id of this run, or `None` for any other id.
    pub fn index_of(&self, msg_id: &str) -> Option<u64> {
        let rest = msg_id.strip_prefix(self.run_id.as_str())?.strip_prefix('-')?;
        if rest.starts_with('0') || rest.starts_with('+') {
            return None; // only the canonical spelling is ours
        }
        rest.parse().ok().filter(|i| *i > 0)
    }

    /// The payload of message `index`: `payload_size` bytes from a seeded xoshiro stream.
    pub fn payload(&self, index: u64) -> Vec<u8> {
        let mut out = vec![0u8; self.payload_size];
        self.fill_payload(index, &mut out);
        out
    }

    /// Writes the payload of `index` into `out` (whose length is the payload size).
    pub fn fill_payload(&self, index: u64, out: &mut [u8]) {
        // Mix the index in so neighbouring messages share no bytes.
        let key = self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        Xoshiro256PlusPlus::seed_from_u64(key).fill_bytes(out);
    }
}

/// Lower-case hex sha256 of `bytes`.
pub fn checksum(bytes: &[u8]) -> String {
    String::from_utf8(checksum_bytes(bytes).to_vec()).expect("hex is ASCII")
}

/// [`checksum`] on the stack, for comparing on every message read without allocating.
pub fn checksum_bytes(bytes: &[u8]) -> [u8; 64] {
    let mut hex = [0u8; 64];
    hex::encode_to_slice(Sha256::digest(bytes), &mut hex).expect("64 hex digits for 32 bytes");
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_deterministic_and_index_dependent() {
        let m = RunMessages::new("r1", 7, 64);
        assert_eq!(m.payload(3), m.payload(3));
        assert_ne!(m.payload(3), m.payload(4));
        assert_ne!(m.payload(3), RunMessages::new("r1", 8, 64).payload(3));
        assert_eq!(m.payload(1).len(), 64);
    }

    #[test]
    fn ids_round_trip_and_foreign_ids_are_rejected() {
        let m = RunMessages::new("abc", 1, 8);
        assert_eq!(m.index_of(&m.msg_id(42)), Some(42));
        for foreign in ["abc-0", "abc-042", "abc-", "abcd-1", "xyz-1", "abc-1x", "abc--1", "abc-+1"] {
            assert_eq!(m.index_of(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn checksum_is_sha256_hex() {
        assert_eq!(
            checksum(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
