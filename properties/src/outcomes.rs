//! What became of every published message, in Jepsen's terms: *ok* (acknowledged and read
//! back), *lost* (acknowledged, then confirmed gone from the stream), *unknown* (sent, but
//! either never consistently acknowledged or never reached by a read that could judge it).
//! Counted from three numbers and the set of lost sequences, nothing per message.

use crate::ranges::Ranges;
use serde::Serialize;

/// Lost ranges listed in full (the rest are only counted).
pub const LISTED: usize = 1000;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MessageOutcomes {
    /// Messages sent (the highest index given to the server).
    pub sent: u64,
    /// Acknowledged in order: `1 ..= acked` (the loss checks' watermark).
    pub acked: u64,
    pub ok: u64,
    pub lost: u64,
    pub unknown: u64,
    /// The first [`LISTED`] lost ranges, `[from, to]`.
    pub lost_ranges: Vec<(u64, u64)>,
    pub lost_range_count: usize,
    /// Acknowledged sequences no read could judge, `[from, to]` (the final read stopped
    /// before them).
    pub unread: Option<(u64, u64)>,
}

/// `sent`, `acked`: as in [`MessageOutcomes`]; `read_up_to`: the highest sequence the last
/// full read got to (read back, or skipped as lost); `lost`: sequences confirmed gone
/// (only those up to `acked` count: nothing unacknowledged is ever called lost).
pub fn outcomes(sent: u64, acked: u64, read_up_to: u64, lost: &Ranges) -> MessageOutcomes {
    let reached = read_up_to.min(acked);
    let lost_acked = lost.count_in(1, acked);
    let lost_reached = lost.count_in(1, reached);
    let acked_ranges = || lost.iter().filter(|&(from, _)| from <= acked).map(|(from, to)| (from, to.min(acked)));
    MessageOutcomes {
        sent: sent.max(acked),
        acked,
        ok: reached - lost_reached,
        lost: lost_acked,
        // Past what the read reached, what was not confirmed lost is not known either way.
        unknown: (acked - reached) - (lost_acked - lost_reached) + sent.saturating_sub(acked),
        lost_ranges: acked_ranges().take(LISTED).collect(),
        lost_range_count: acked_ranges().count(),
        unread: (reached < acked).then_some((reached + 1, acked)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(ranges: &[(u64, u64)]) -> Ranges {
        let mut r = Ranges::default();
        for &(a, b) in ranges {
            r.insert_range(a, b);
        }
        r
    }

    #[test]
    fn a_clean_run_is_all_ok_but_what_was_in_flight() {
        let o = outcomes(1016, 1000, 1000, &Ranges::default());
        assert_eq!((o.ok, o.lost, o.unknown, o.unread), (1000, 0, 16, None));
    }

    #[test]
    fn lost_messages_are_counted_and_listed_and_the_unread_tail_is_unknown() {
        let o = outcomes(1000, 1000, 800, &lost(&[(101, 200), (700, 750), (990, 1200)]));
        assert_eq!(o.lost, 100 + 51 + 11, "only acknowledged sequences are lost");
        assert_eq!(o.lost_ranges, vec![(101, 200), (700, 750), (990, 1000)]);
        assert_eq!(o.ok, 800 - 151);
        assert_eq!(o.unread, Some((801, 1000)));
        assert_eq!(o.unknown, 200 - 11, "the unread tail, less what was confirmed lost there");
        assert_eq!(o.ok + o.lost + o.unknown, o.sent);
    }

    #[test]
    fn many_holes_are_counted_but_listed_only_up_to_the_limit() {
        let holes: Vec<(u64, u64)> = (0..LISTED as u64 + 200).map(|i| (i * 10 + 1, i * 10 + 1)).collect();
        let o = outcomes(30_000, 30_000, 30_000, &lost(&holes));
        assert_eq!((o.lost, o.lost_range_count, o.lost_ranges.len()), (LISTED as u64 + 200, LISTED + 200, LISTED));
    }
}
