//! Where the ranks of a communicator sit on their hosts: each rank's host index and index
//! there, each host's ranks, and the shapes of placement the stage plans ask for. Pure: the
//! hosts' ids in, places out.

/// How the ranks of `hosts` (each rank's host id, in rank order) sit on their hosts, if there
/// are at least two hosts and one of them has two ranks or more (else there is nothing to gain):
/// each rank's (host index in order of first appearance, index among its host's ranks in rank
/// order).
pub fn places(hosts: &[u64]) -> Option<Vec<(usize, usize)>> {
    let mut order: Vec<u64> = Vec::new();
    let mut count: Vec<usize> = Vec::new();
    let mut place = Vec::with_capacity(hosts.len());
    for &h in hosts {
        let i = match order.iter().position(|&x| x == h) {
            Some(i) => i,
            None => {
                order.push(h);
                count.push(0);
                order.len() - 1
            }
        };
        place.push((i, count[i]));
        count[i] += 1;
    }
    if order.len() < 2 || count.iter().all(|&c| c < 2) {
        return None;
    }
    Some(place)
}

/// Each host's ranks (by host index), in rank order: a host's `i`-th holds index `i` there.
pub fn ranks_by_host(places: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let hosts = places.iter().map(|p| p.0).max().map_or(0, |h| h + 1);
    let mut ranks = vec![Vec::new(); hosts];
    for (r, &(h, _)) in places.iter().enumerate() {
        ranks[h].push(r);
    }
    ranks
}

/// A rank's place in the communicator across the hosts that holds it: how many ranks before it
/// hold the same index on their hosts.
pub fn cross_rank(places: &[(usize, usize)], rank: usize) -> Option<usize> {
    let (_, local) = *places.get(rank)?;
    Some(places[..rank].iter().filter(|p| p.1 == local).count())
}

/// Whether every host's ranks are consecutive in rank order (hosts of any sizes).
pub fn hosts_contiguous(places: &[(usize, usize)]) -> bool {
    places.first() == Some(&(0, 0))
        && places.windows(2).all(|w| match w[1].0 == w[0].0 {
            true => w[1].1 == w[0].1 + 1,
            false => w[1] == (w[0].0 + 1, 0),
        })
}

/// Whether every host holds as many ranks, consecutive in rank order.
pub fn hosts_consecutive(places: &[(usize, usize)]) -> bool {
    let per = places.iter().filter(|p| p.0 == 0).count();
    per > 0
        && places.len() % per == 0
        && places
            .iter()
            .enumerate()
            .all(|(r, &p)| p == (r / per, r % per))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_hosts_or_more_with_a_host_of_two_ranks_make_a_hierarchy() {
        // Two hosts of two, interleaved: host index by first appearance, place by rank order.
        let p = places(&[7, 9, 9, 7]).unwrap();
        assert_eq!(p, [(0, 0), (1, 0), (1, 1), (0, 1)]);
        // The communicator of index 1 holds ranks 2 and 3 in rank order: host 1 first.
        assert_eq!(cross_rank(&p, 2), Some(0));
        assert_eq!(cross_rank(&p, 3), Some(1));
        assert_eq!(cross_rank(&p, 1), Some(1));
        // One host; one rank a host: none.
        assert_eq!(places(&[1, 1, 1, 1]), None);
        assert_eq!(places(&[1, 2, 3]), None);
        // Hosts of unequal size: a hierarchy, but not one of equal hosts' consecutive ranks.
        let p = places(&[1, 1, 2, 2, 2]).unwrap();
        assert_eq!(p, [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]);
        assert!(!hosts_consecutive(&p));
        assert!(!hosts_consecutive(&places(&[1, 1, 2]).unwrap()));
        assert!(!hosts_consecutive(&places(&[1, 1, 1, 2, 2, 3]).unwrap()));
        assert!(hosts_consecutive(&places(&[1, 1, 2, 2, 3, 3]).unwrap()));
        assert!(!hosts_consecutive(&places(&[1, 2, 1, 2]).unwrap()));
    }
}
