//! Sets of stream sequences kept as ranges, so that memory grows with the holes and not
//! with the messages (the durable consumer's ledger, the messages found lost).

use std::collections::BTreeMap;

/// A set of sequences as disjoint, non-adjacent closed ranges `start ..= end`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ranges(BTreeMap<u64, u64>);

impl Ranges {
    pub fn insert(&mut self, seq: u64) {
        self.insert_range(seq, seq);
    }

    /// Adds `from ..= to` (nothing when `from > to`).
    pub fn insert_range(&mut self, from: u64, to: u64) {
        if from > to {
            return;
        }
        let (mut start, mut end) = (from, to);
        // Every range touching or adjacent to `from ..= to` merges into it.
        let touching: Vec<(u64, u64)> = self.0.range(..=to.saturating_add(1)).rev().take_while(|(_, &e)| e.saturating_add(1) >= from).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in touching {
            self.0.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.0.insert(start, end);
    }

    pub fn contains(&self, seq: u64) -> bool {
        self.0.range(..=seq).next_back().is_some_and(|(_, &e)| seq <= e)
    }

    /// The highest `n` such that every sequence `1 ..= n` is in the set (0: 1 is not).
    pub fn floor(&self) -> u64 {
        match self.0.first_key_value() {
            Some((&1, &e)) => e,
            _ => 0,
        }
    }

    /// The highest sequence in the set (0: empty).
    pub fn high(&self) -> u64 {
        self.0.last_key_value().map_or(0, |(_, &e)| e)
    }

    /// The end of the range holding `seq`, if one does.
    pub fn end_of(&self, seq: u64) -> Option<u64> {
        self.0.range(..=seq).next_back().and_then(|(_, &e)| (seq <= e).then_some(e))
    }

    /// The lowest sequence in `1 ..= limit` that is not in the set.
    pub fn first_missing(&self, limit: u64) -> Option<u64> {
        let next = self.floor() + 1;
        (next <= limit).then_some(next)
    }

    /// How many sequences of `from ..= to` are in the set.
    pub fn count_in(&self, from: u64, to: u64) -> u64 {
        if from > to {
            return 0;
        }
        let before = self.0.range(..from).next_back().map(|(&s, &e)| (s, e));
        before.into_iter().chain(self.0.range(from..=to).map(|(&s, &e)| (s, e))).map(|(s, e)| e.min(to).saturating_add(1).saturating_sub(s.max(from))).sum()
    }

    /// Drops every sequence above `n`.
    pub fn remove_above(&mut self, n: u64) {
        self.0.retain(|&s, _| s <= n);
        if let Some(mut last) = self.0.last_entry() {
            *last.get_mut() = (*last.get()).min(n);
        }
    }

    /// The first `max` runs of sequences in `1 ..= limit` that are NOT in the set, as
    /// closed ranges, in order.
    pub fn gaps(&self, limit: u64, max: usize) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut next = 1u64;
        for (s, e) in self.iter() {
            if next > limit || out.len() == max {
                return out;
            }
            if s > next {
                out.push((next, (s - 1).min(limit)));
            }
            next = next.max(e.saturating_add(1));
        }
        if next <= limit && out.len() < max {
            out.push((next, limit));
        }
        out
    }

    /// The ranges in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().map(|(&s, &e)| (s, e))
    }

    /// The number of ranges (holes + 1 at most): what the set costs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_the_missing_runs_up_to_a_limit() {
        let mut r = Ranges::default();
        assert_eq!(r.gaps(3, 8), vec![(1, 3)]);
        r.insert_range(1, 4);
        r.insert_range(7, 9);
        r.insert(12);
        assert_eq!(r.gaps(20, 8), vec![(5, 6), (10, 11), (13, 20)]);
        assert_eq!(r.gaps(10, 8), vec![(5, 6), (10, 10)]);
        assert_eq!(r.gaps(9, 8), vec![(5, 6)]);
        assert_eq!(r.gaps(20, 1), vec![(5, 6)], "at most `max`");
        assert_eq!(r.gaps(4, 8), Vec::<(u64, u64)>::new());
    }
    use proptest::prelude::*;

    #[test]
    fn ranges_merge_and_report_the_floor() {
        let mut r = Ranges::default();
        assert_eq!(r.floor(), 0);
        for s in [2, 4, 3] {
            r.insert(s);
        }
        assert_eq!((r.floor(), r.len()), (0, 1));
        assert_eq!(r.first_missing(10), Some(1));
        r.insert(1);
        assert_eq!((r.floor(), r.len()), (4, 1));
        r.insert(6);
        assert!(r.contains(6) && !r.contains(5) && r.contains(1));
        assert_eq!(r.first_missing(4), None);
        assert_eq!(r.first_missing(6), Some(5));
        r.insert_range(10, 20);
        r.insert_range(8, 8);
        assert_eq!(r.len(), 4);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(1, 4), (6, 6), (8, 8), (10, 20)]);
        r.insert_range(5, 9);
        assert_eq!((r.floor(), r.len()), (20, 1));
        r.insert_range(3, 2);
        assert_eq!(r.len(), 1, "an empty range adds nothing");
    }

    #[test]
    fn remove_above_cuts_the_range_it_falls_in_and_drops_the_later_ones() {
        let mut r = Ranges::default();
        r.insert_range(1, 10);
        r.insert_range(15, 20);
        r.insert(30);
        r.remove_above(17);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(1, 10), (15, 17)]);
        r.remove_above(12);
        assert_eq!(r.iter().collect::<Vec<_>>(), vec![(1, 10)]);
        r.remove_above(0);
        assert!(r.is_empty());
    }

    proptest! {
        /// Ranges hold exactly the inserted sequences, whatever the order and overlaps, and
        /// count any window of them as a plain set would.
        #[test]
        fn ranges_match_a_plain_set(ops in proptest::collection::vec((1u64..100, 0u64..5), 0..60), window in (0u64..110, 0u64..40)) {
            let mut r = Ranges::default();
            let mut plain = std::collections::BTreeSet::new();
            for (from, len) in ops {
                r.insert_range(from, from + len);
                plain.extend(from..=from + len);
            }
            for seq in 0..110 {
                prop_assert_eq!(r.contains(seq), plain.contains(&seq), "seq {}", seq);
            }
            let runs = plain.iter().zip(plain.iter().skip(1)).filter(|(a, b)| **b != **a + 1).count() + usize::from(!plain.is_empty());
            prop_assert_eq!(r.len(), runs, "ranges are disjoint and never adjacent");
            let (from, to) = (window.0, window.0 + window.1);
            prop_assert_eq!(r.count_in(from, to), plain.range(from..=to).count() as u64);
            prop_assert_eq!(r.count_in(to + 1, from), 0);
        }
    }
}
