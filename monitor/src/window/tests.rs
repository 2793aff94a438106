use super::*;

/// The integer order is `Key`'s own, so the map iterates keys as the B-tree did, and a
/// key inserted once is found again (and not inserted twice).
#[test]
fn the_key_map_keeps_keys_in_their_order() {
    let keys = [
        Key::Nic(1),
        Key::Peer(u32::MAX),
        Key::Path(0),
        Key::Peer(0),
        Key::Nic(u16::MAX),
        Key::Path(u16::MAX),
        Key::Peer(7),
    ];
    for a in keys {
        for b in keys {
            assert_eq!(order(a).cmp(&order(b)), a.cmp(&b), "{a:?} {b:?}");
        }
    }
    let w = Work {
        ts_ns: 1,
        bytes: 1,
        peer: 0,
        path: 0,
        nic: 0,
        engine: crate::Engine::Mpt,
        unit: crate::Unit::Chunk,
        coll: NO_COLL,
    };
    let mut map = KeyMap::default();
    for (i, &k) in keys.iter().enumerate() {
        map.get_or_insert(k, &w).bytes = i as u64;
    }
    for (i, &k) in keys.iter().enumerate() {
        assert_eq!(map.get_or_insert(k, &w).bytes, i as u64);
    }
    let mut sorted = keys.to_vec();
    sorted.sort();
    assert_eq!(map.iter().map(|(k, _)| *k).collect::<Vec<_>>(), sorted);
}
