//! Whom a fault strikes. Jepsen's nemeses aim at primaries; here, with probability `bias`,
//! a node is drawn among those whose role matters right now, weighted by how much (see
//! [`weight`]), otherwise any healthy node is. An aligned strike (right after a scale
//! request) prefers the roles the change is about.

use crate::nats::view::Role;
use rand::seq::SliceRandom;
use rand::Rng;

/// How much striking a node in `roles` matters: losing the only copy or the leader of the
/// stream most, a replica being added next, then the meta leader, then a plain follower.
pub fn weight(roles: &[Role]) -> u32 {
    let w = |r: &Role| match r {
        Role::SoleReplica | Role::StreamLeader => 4,
        Role::CatchingUp => 3,
        Role::MetaLeader => 2,
        Role::Follower => 1,
    };
    roles.iter().map(w).max().unwrap_or(0)
}

/// Draws one of `candidates` (node index and its roles). `prefer`: if any candidate holds
/// one of these roles, one of those is drawn (weighted); else the biased draw.
pub fn pick(rng: &mut impl Rng, candidates: &[(usize, Vec<Role>)], bias: f64, prefer: &[Role]) -> Option<usize> {
    let preferred: Vec<&(usize, Vec<Role>)> = candidates.iter().filter(|(_, roles)| roles.iter().any(|r| prefer.contains(r))).collect();
    if !preferred.is_empty() {
        return preferred.choose_weighted(rng, |(_, roles)| weight(roles)).ok().map(|(i, _)| *i);
    }
    if rng.gen_bool(bias.clamp(0.0, 1.0)) {
        let interesting: Vec<&(usize, Vec<Role>)> = candidates.iter().filter(|(_, roles)| weight(roles) > 0).collect();
        if let Ok((i, _)) = interesting.choose_weighted(rng, |(_, roles)| weight(roles)) {
            return Some(*i);
        }
    }
    candidates.choose(rng).map(|(i, _)| *i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    fn count(candidates: &[(usize, Vec<Role>)], bias: f64, prefer: &[Role]) -> [u32; 3] {
        let mut rng = StdRng::seed_from_u64(7);
        let mut hits = [0; 3];
        for _ in 0..3000 {
            hits[pick(&mut rng, candidates, bias, prefer).unwrap()] += 1;
        }
        hits
    }

    #[test]
    fn the_bias_aims_at_the_roles_that_matter() {
        let nodes = vec![(0, vec![Role::StreamLeader]), (1, vec![Role::Follower]), (2, vec![])];
        let uniform = count(&nodes, 0.0, &[]);
        assert!(uniform.iter().all(|h| (800..1200).contains(h)), "no bias: uniform {uniform:?}");
        let aimed = count(&nodes, 1.0, &[]);
        assert_eq!(aimed[2], 0, "a bystander is never aimed at: {aimed:?}");
        assert!(aimed[0] > 3 * aimed[1], "the leader weighs 4, a follower 1: {aimed:?}");
        let aligned = count(&nodes, 0.0, &[Role::StreamLeader, Role::CatchingUp]);
        assert_eq!(aligned, [3000, 0, 0], "an aligned strike takes the preferred role");
        assert_eq!(count(&[(0, vec![]), (1, vec![]), (2, vec![])], 1.0, &[Role::StreamLeader]).iter().sum::<u32>(), 3000, "nobody interesting: any node");
        assert_eq!(pick(&mut StdRng::seed_from_u64(1), &[], 1.0, &[]), None);
    }
}
