//! The order in which a link to another host tries the selected NICs, from a topology plan:
//! the rank's primary NIC, its backup, the rest in list order; both ends of a link take the
//! lower rank's order; a communicator split off a wider one keeps that one's spread. Pure
//! functions; `ccl` applies them with the NICs its settings select.

use crate::plan::Plan;

/// The NIC order of this process in the communicator with the most ranks on its host so far:
/// that many ranks, the NIC names, the order.
pub type Widest = std::sync::Mutex<Option<(usize, Vec<String>, Vec<usize>)>>;

/// The order to use, given the plan's `order` for a communicator with `local` ranks on this
/// host: the order from the communicator with more ranks here, if one was set up before over
/// the same NICs. A communicator split off another (the hierarchy's one rank per host, say)
/// sees only its own ranks, and each would be its host's first and take the first NIC; the
/// widest one spread its ranks over the NICs, and each process keeps its place in that spread.
pub fn widest_order(
    widest: &Widest,
    names: &[String],
    local: usize,
    order: Vec<usize>,
) -> Vec<usize> {
    let mut w = widest.lock().unwrap_or_else(|p| p.into_inner());
    match &*w {
        Some((n, ns, o)) if *n > local && ns == names => o.clone(),
        Some((n, ns, _)) if *n >= local && ns == names => order,
        _ => {
            *w = Some((local, names.to_vec(), order.clone()));
            order
        }
    }
}

/// The interface names of `rank`'s primary and backup NIC in `plan`.
pub fn plan_nic_names(plan: &Plan, rank: usize) -> (Option<String>, Option<String>) {
    let name = |dev: Option<u32>| Some(plan.net_info(rank, dev?)?.name.clone());
    (
        name(plan.primary_nic.get(rank).copied().flatten()),
        name(plan.backup_nic.get(rank).copied().flatten()),
    )
}

/// The order of `names` (indices) that puts `primary` first and `backup` second, where they
/// are among them, and keeps the rest in list order.
pub fn preferred_order(
    names: &[String],
    primary: Option<&str>,
    backup: Option<&str>,
) -> Vec<usize> {
    let place = |n: Option<&str>| n.and_then(|n| names.iter().position(|x| x == n));
    let mut order: Vec<usize> = Vec::with_capacity(names.len());
    for k in [place(primary), place(backup)].into_iter().flatten() {
        if !order.contains(&k) {
            order.push(k);
        }
    }
    let rest: Vec<usize> = (0..names.len()).filter(|k| !order.contains(k)).collect();
    order.extend(rest);
    order
}

/// The order both ends of a link use: the lower rank's.
pub fn link_order(rank: usize, peer: usize, mine: &[usize], theirs: &[usize]) -> Vec<usize> {
    if rank < peer {
        mine.to_vec()
    } else {
        theirs.to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::{link_order, preferred_order, widest_order};

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_primary_comes_first_then_the_backup_then_list_order() {
        let n = names(&["nic0", "nic1", "nic2"]);
        assert_eq!(preferred_order(&n, Some("nic1"), Some("nic0")), [1, 0, 2]);
        assert_eq!(preferred_order(&n, Some("nic2"), Some("nic0")), [2, 0, 1]);
        assert_eq!(preferred_order(&n, Some("nic2"), None), [2, 0, 1]);
        // Names the list does not have are passed over; nothing: list order.
        assert_eq!(preferred_order(&n, Some("eth9"), Some("nic1")), [1, 0, 2]);
        assert_eq!(preferred_order(&n, None, None), [0, 1, 2]);
        assert_eq!(preferred_order(&n, Some("nic1"), Some("nic1")), [1, 0, 2]);
        assert!(preferred_order(&[], Some("nic0"), None).is_empty());
    }

    /// A communicator split off a wider one keeps each process's place in the wider spread;
    /// an equally wide or wider one, or one over other NICs, uses its own plan.
    #[test]
    fn a_narrower_communicator_keeps_the_widest_ones_order() {
        let widest: super::Widest = std::sync::Mutex::new(None);
        let n = names(&["nic0", "nic1"]);
        // The world: two ranks here, this one second on its host.
        assert_eq!(widest_order(&widest, &n, 2, vec![1, 0]), [1, 0]);
        // The hierarchy's cross-host communicator: one rank here, its plan says nic0.
        assert_eq!(widest_order(&widest, &n, 1, vec![0, 1]), [1, 0]);
        // Another as wide: its own plan.
        assert_eq!(widest_order(&widest, &n, 2, vec![0, 1]), [0, 1]);
        // Other NICs: its own plan, and it becomes the reference.
        let other = names(&["eth0", "eth1"]);
        assert_eq!(widest_order(&widest, &other, 1, vec![0, 1]), [0, 1]);
        // A wider one: its own plan, and the reference from then on.
        assert_eq!(widest_order(&widest, &n, 4, vec![0, 1]), [0, 1]);
        assert_eq!(widest_order(&widest, &n, 1, vec![1, 0]), [0, 1]);
    }

    #[test]
    fn both_ends_of_a_link_take_the_lower_ranks_order() {
        let (a, b) = ([0, 1], [1, 0]);
        assert_eq!(link_order(0, 3, &a, &b), a);
        assert_eq!(link_order(3, 0, &b, &a), a);
        assert_eq!(link_order(1, 2, &b, &a), b);
        assert_eq!(link_order(2, 1, &a, &b), b);
    }
}
