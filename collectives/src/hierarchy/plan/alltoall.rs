//! An all-to-all's stages: blocks gathered on the host by the index of their destination,
//! then a host's blocks in one message across the hosts (NCCL's PXN).

use super::parts::P2p;

/// An all-to-all's two stages on a rank (every host's ranks consecutive, `per` of them on
/// each), blocks of `bytes`, as sends and receives: on the host, to each rank of the host
/// (itself too) the blocks for the ranks holding that rank's index on every host, received
/// into `scratch` by (host, sender); then across the hosts, to each host's rank holding this
/// rank's index the `per` blocks gathered for it (one message), received straight into the
/// output where its host's ranks' blocks go. The network carries each block once, in messages
/// of a host's blocks; the host's links the rest -- NCCL's PXN.
pub fn alltoall_blocks(
    places: &[(usize, usize)],
    send: usize,
    recv: usize,
    scratch: usize,
    bytes: usize,
) -> Option<(Vec<P2p>, Vec<P2p>)> {
    let per = places.iter().filter(|p| p.0 == 0).count();
    if per == 0 || places.len() % per != 0 {
        return None;
    }
    let hosts = places.len() / per;
    let mut local = Vec::with_capacity(2 * places.len());
    for q in 0..per {
        let block = |host: usize| (host * per + q) * bytes;
        local.extend((0..hosts).map(|host| P2p::Send {
            peer: q,
            from: send + block(host),
        }));
        local.extend((0..hosts).map(|host| P2p::Recv {
            peer: q,
            into: scratch + block(host),
        }));
    }
    let mut cross = Vec::with_capacity(2 * hosts);
    for k in 0..hosts {
        cross.push(P2p::Send {
            peer: k,
            from: scratch + k * per * bytes,
        });
        cross.push(P2p::Recv {
            peer: k,
            into: recv + k * per * bytes,
        });
    }
    Some((local, cross))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hierarchy::placement::places;

    /// Two hosts of two (ranks 0,1 and 2,3), 16-byte blocks, from rank 1's view: on its host
    /// it sends rank 0 (its host index 0) the blocks for ranks 0 and 2 and itself those for
    /// 1 and 3, receiving each one's into the scratch by (destination host, sender); across
    /// the hosts it sends the two blocks gathered for each host's index-1 rank in one message
    /// (to itself too) and takes each host's two blocks into their places.
    #[test]
    fn an_all_to_all_gathers_on_the_host_then_crosses_once_per_host() {
        let p = places(&[7, 7, 9, 9]).unwrap();
        let (send, recv, scratch) = (0x1000, 0x2000, 0x5000);
        let (local, cross) = alltoall_blocks(&p, send, recv, scratch, 16).unwrap();
        use P2p::{Recv, Send};
        let s = |peer, from| Send { peer, from };
        let r = |peer, into| Recv { peer, into };
        assert_eq!(
            local,
            [
                s(0, 0x1000),
                s(0, 0x1020),
                r(0, 0x5000),
                r(0, 0x5020),
                s(1, 0x1010),
                s(1, 0x1030),
                r(1, 0x5010),
                r(1, 0x5030),
            ]
        );
        assert_eq!(
            cross,
            [s(0, 0x5000), r(0, 0x2000), s(1, 0x5020), r(1, 0x2020)]
        );
    }
}
