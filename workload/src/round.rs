//! Which fault type or operation comes next: drawn from a round, not independently. A round
//! holds each listed kind as often as it is listed (a weight is a count per round); each
//! draw takes one of the round's kinds whose precondition holds, at random, and a new round
//! starts when none is left. So every kind comes within one round of draws (a 150-second
//! run sees each, where independent draws left one out now and then), and repetitions still
//! weigh the kinds.

use rand::{seq::SliceRandom, Rng};

pub struct Round<T> {
    listed: Vec<T>,
    left: Vec<T>,
    /// Kinds put back into this round once already.
    deferred: Vec<T>,
}

impl<T: Copy + PartialEq> Round<T> {
    pub fn new(listed: Vec<T>) -> Self {
        Self { left: listed.clone(), listed, deferred: Vec::new() }
    }

    /// A round holding each kind as often as its weight.
    pub fn weighted(weights: &[(T, u32)]) -> Self {
        Self::new(weights.iter().flat_map(|&(kind, w)| std::iter::repeat_n(kind, w as usize)).collect())
    }

    /// The next kind among those `allowed` now; None if none of them is listed. A kind not
    /// allowed stays in the round for a later draw.
    pub fn next(&mut self, rng: &mut impl Rng, allowed: impl Fn(T) -> bool) -> Option<T> {
        let open = |left: &[T]| -> Vec<usize> { (0..left.len()).filter(|&i| allowed(left[i])).collect() };
        let mut choices = open(&self.left);
        if choices.is_empty() {
            self.left = self.listed.clone();
            self.deferred.clear();
            choices = open(&self.left);
        }
        let &i = choices.choose(rng)?;
        Some(self.left.swap_remove(i))
    }

    /// A kind drawn that could not be carried out (nothing for it to act on just then) gets
    /// one more chance later in the same round; a second miss waits for the next round.
    pub fn later(&mut self, kind: T) {
        if !self.deferred.contains(&kind) {
            self.deferred.push(kind);
            self.left.push(kind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FaultKind::{self, *};
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn every_listed_type_comes_once_per_round() {
        let mut rng = StdRng::seed_from_u64(11);
        let mut round = Round::new(FaultKind::ALL.to_vec());
        for _ in 0..3 {
            let mut seen: Vec<FaultKind> = (0..FaultKind::ALL.len()).map(|_| round.next(&mut rng, |_| true).unwrap()).collect();
            seen.sort_by_key(|k| format!("{k:?}"));
            let mut all = FaultKind::ALL.to_vec();
            all.sort_by_key(|k| format!("{k:?}"));
            assert_eq!(seen, all);
        }
    }

    #[test]
    fn repetitions_weigh_and_a_type_not_allowed_waits() {
        let mut rng = StdRng::seed_from_u64(3);
        let mut round = Round::new(vec![Kill, Kill, Pause, Membership]);
        let first: Vec<_> = (0..3).map(|_| round.next(&mut rng, |k| k != Membership).unwrap()).collect();
        assert_eq!(first.iter().filter(|k| **k == Kill).count(), 2);
        assert!(first.contains(&Pause));
        // Only Membership is left; allowed now, it comes next.
        assert_eq!(round.next(&mut rng, |_| true), Some(Membership));
        assert_eq!(round.next(&mut rng, |k| k == Split), None, "nothing listed is allowed");
    }

    #[test]
    fn weights_are_counts_per_round() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut round = Round::weighted(&[("scale", 3), ("move", 1), ("never", 0)]);
        let mut drawn: Vec<&str> = (0..4).map(|_| round.next(&mut rng, |_| true).unwrap()).collect();
        drawn.sort_unstable();
        assert_eq!(drawn, ["move", "scale", "scale", "scale"]);
    }

    #[test]
    fn a_kind_that_could_not_act_gets_one_more_chance_in_its_round() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut round = Round::new(vec!["peer-remove", "scale"]);
        let first = round.next(&mut rng, |_| true).unwrap();
        round.later(first);
        let rest: Vec<_> = (0..2).map(|_| round.next(&mut rng, |_| true).unwrap()).collect();
        assert_eq!(rest.iter().filter(|k| **k == first).count(), 1, "{rest:?}");
        round.later(first);
        let next_round: Vec<_> = (0..2).map(|_| round.next(&mut rng, |_| true).unwrap()).collect();
        assert!(next_round.contains(&"scale") && next_round.contains(&"peer-remove"), "a new round, nothing carried over twice: {next_round:?}");
    }
}
