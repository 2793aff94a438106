//! The verbs datapath on a machine without rdma-core or an RDMA device: loading fails with
//! a clean error (never a panic), and the pure parts (queue-pair plan, GID choice,
//! immediate codec) work end to end through the public API.

#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)] // tests

use ccl_transports::mpt::header::ChunkHeader;
use ccl_transports::mpt::verbs::gid::{choose, reresolve};
use ccl_transports::mpt::verbs::imm::{frame_from_completion, imm_to_wire};
use ccl_transports::mpt::verbs::qp::LinkLayer;
use ccl_transports::mpt::verbs::{
    GidEntry, GidPolicy, GidType, IbParams, NetdevState, QpEndpoint, QpKind, QpPlan, QpState,
    Verbs, VerbsError, WrId, WrKind,
};
use ccl_transports::mpt::PathId;

#[test]
fn load_without_rdma_is_a_clean_error() {
    let loaded = std::panic::catch_unwind(Verbs::load).expect("Verbs::load must not panic");
    match loaded {
        Err(VerbsError::NoLibrary(msg)) => assert!(msg.contains("libibverbs"), "{msg}"),
        Err(VerbsError::MissingSymbol(s)) => panic!("libibverbs present but lacks {s}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(v) => {
            // rdma-core installed: without hardware the device list must still be a clean error.
            match v.devices() {
                Err(VerbsError::NoRdmaDevice) => {}
                Ok(d) => eprintln!("RDMA devices present: {d:?}"),
                Err(e) => panic!("unexpected error {e}"),
            }
        }
    }
    let probe = Verbs::probe();
    assert!(matches!(
        probe,
        Err(VerbsError::NoLibrary(_)) | Err(VerbsError::NoRdmaDevice) | Ok(_)
    ));
    if let Err(e) = probe {
        assert!(!e.to_string().is_empty());
    }
}

fn endpoint(qpn: u32, psn: u32, gid: [u8; 16], gid_index: u8) -> QpEndpoint {
    QpEndpoint {
        qpn,
        psn,
        lid: 0,
        gid,
        gid_index,
        port: 1,
        mtu: 5,
        link_layer: LinkLayer::Ethernet,
    }
}

#[test]
fn connection_setup_from_gid_table_to_rts() {
    let v4 = |last: u8| {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[10, 1, 0, last]);
        g
    };
    let mut ll = [0u8; 16];
    ll[0] = 0xfe;
    ll[1] = 0x80;
    ll[15] = 1;
    let table = |last| {
        vec![
            GidEntry {
                index: 0,
                gid: ll,
                kind: GidType::RoceV1,
                netdev: NetdevState::Up,
            },
            GidEntry {
                index: 1,
                gid: ll,
                kind: GidType::RoceV2,
                netdev: NetdevState::Up,
            },
            GidEntry {
                index: 2,
                gid: v4(last),
                kind: GidType::RoceV1,
                netdev: NetdevState::Up,
            },
            GidEntry {
                index: 3,
                gid: v4(last),
                kind: GidType::RoceV2,
                netdev: NetdevState::Up,
            },
        ]
    };
    let policy = GidPolicy::default();
    let a = choose(&table(1), &policy).unwrap();
    let b = choose(&table(2), &policy).unwrap();
    assert_eq!((a.index, b.index), (3, 3));
    let la = endpoint(0x101, 0x1111, a.gid, a.index as u8);
    let lb = endpoint(0x202, 0x2222, b.gid, b.index as u8);

    // A offered UC, B's provider refused it and fell back: both use RC.
    let kind = QpKind::negotiate(QpKind::Uc, QpKind::Uc.fallback().unwrap());
    assert_eq!(kind, QpKind::Rc);
    let plan = QpPlan::new(IbParams::from_lookup(&|_| None).unwrap());
    let sa = plan.transitions(kind, &la, &lb).unwrap();
    let sb = plan.transitions(kind, &lb, &la).unwrap();
    assert_eq!(sa.last().unwrap().state, QpState::Rts);
    // Each side's RQ PSN is the other's SQ PSN.
    assert_eq!(sa[1].attr.rq_psn, sb[2].attr.sq_psn);
    assert_eq!(sb[1].attr.rq_psn, sa[2].attr.sq_psn);
    assert_eq!(sa[1].attr.ah_attr.grh.dgid.raw, b.gid);
    assert_eq!(sa[2].attr.timeout, 20);

    // Port flap: the same table comes back, nothing to redo.
    assert!(!reresolve(Some(&a), &table(1), &policy).unwrap().changed);
    // The address changed: reconnect through ERR.
    assert!(reresolve(Some(&a), &table(9), &policy).unwrap().changed);
    assert_eq!(QpPlan::to_error().state, QpState::Err);
}

#[test]
fn chunk_header_and_wr_id_travel_through_a_completion() {
    let h = ChunkHeader::new(true, 200, 15, 2047).unwrap();
    let wr = WrId {
        kind: WrKind::Data,
        conn: 12345,
        path: PathId(255),
        chunk: 0xfedc_ba98,
    };
    let wr_id = wr.pack().unwrap();
    assert_eq!(WrId::unpack(wr_id), wr);
    let f = frame_from_completion(imm_to_wire(h), 4096, 8192);
    assert_eq!(f.header, h);
    assert!(f.header.last());
    assert_eq!(f.seq_hi, None);
}
