//! Small fabrics checked against analytic bounds, determinism, EQDS credit discipline, and
//! recovery from queue overflow.

use ccl_sim::{permutation, run_permutation, Params, Simulator};
use ccl_transports::mpt::CcKind;

/// 8 NICs, 4 per leaf, 2 spines (leaf-spine links at 800 Gb/s: full bisection).
fn small(cc: CcKind) -> Params {
    Params {
        nics: 8,
        hosts_per_leaf: 4,
        spines: 2,
        bytes: 4_000_000,
        paths: 32,
        cc,
        seed: 3,
        ..Params::default()
    }
}

#[test]
fn permutation_is_a_derangement() {
    for n in [2, 3, 8, 1024] {
        let p = permutation(n, 9);
        let mut seen = vec![false; n];
        for (i, &d) in p.iter().enumerate() {
            assert_ne!(i, d);
            assert!(!seen[d]);
            seen[d] = true;
        }
    }
}

#[test]
fn single_flow_matches_analytic_time() {
    // One flow across the spines: the host link is the bottleneck. Ideal = bytes at 400 Gb/s
    // (80 us for 4 MB); allow for headers (0.2%), the rendezvous round trip, slow start and
    // the last chunk's pipeline (a few us).
    for cc in [CcKind::Swift, CcKind::Cubic, CcKind::Eqds] {
        let p = small(cc);
        let r = Simulator::new(p, &[(0, 5)]).unwrap().run().unwrap();
        assert_eq!(r.ideal_ns, 80_000);
        let f = &r.flows[0];
        assert_eq!(f.bytes, 4_000_000);
        assert!(
            f.fct_ns >= r.ideal_ns && f.fct_ns <= r.ideal_ns * 115 / 100,
            "{cc}: {} ns vs ideal {} ns",
            f.fct_ns,
            r.ideal_ns
        );
        assert_eq!(r.drops, 0);
    }
}

#[test]
fn permutation_on_small_fabric_within_band() {
    for cc in [CcKind::Swift, CcKind::Cubic, CcKind::Eqds] {
        let r = run_permutation(&small(cc)).unwrap();
        assert_eq!(r.flows.len(), 8);
        assert!(r.flows.iter().all(|f| f.bytes == 4_000_000));
        assert!(
            r.last_ns >= r.ideal_ns && r.last_ns <= r.ideal_ns * 2,
            "{cc}: last {} ns, ideal {} ns",
            r.last_ns,
            r.ideal_ns
        );
        assert!(r.mean_ns <= r.p99_ns && r.p99_ns <= r.last_ns);
    }
}

#[test]
fn same_seed_same_result() {
    for cc in [CcKind::Swift, CcKind::Eqds] {
        let a = run_permutation(&small(cc)).unwrap();
        let b = run_permutation(&small(cc)).unwrap();
        assert_eq!(a, b);
        let c = run_permutation(&Params {
            seed: 4,
            ..small(cc)
        })
        .unwrap();
        assert_ne!(a.flows, c.flows);
    }
}

#[test]
fn eqds_never_exceeds_credit() {
    // Incast (6 senders into one host, each receiver connection granting credit) and a
    // permutation: no sender ever transmits more bytes than it was granted.
    let p = Params {
        queue_bytes: 256 * 1024,
        ..small(CcKind::Eqds)
    };
    let flows: Vec<(usize, usize)> = (1..7).map(|s| (s, 0)).collect();
    let r = Simulator::new(p.clone(), &flows).unwrap().run().unwrap();
    assert!(r.data_packets > 0);
    assert_eq!(r.credit_violations, 0);
    assert!(r.max_credit_excess <= 0, "{}", r.max_credit_excess);
    let r = run_permutation(&p).unwrap();
    assert_eq!(r.credit_violations, 0);
    assert!(r.max_credit_excess <= 0);
}

#[test]
fn queue_overflow_is_recovered_and_every_byte_arrives() {
    // Incast of 6 senders into one host with 64 KiB port buffers: the last-hop queue
    // overflows; loss recovery must still deliver every byte of every flow.
    for cc in [CcKind::Swift, CcKind::Cubic] {
        let p = Params {
            queue_bytes: 64 * 1024,
            bytes: 2_000_000,
            ..small(cc)
        };
        let flows: Vec<(usize, usize)> = (1..7).map(|s| (s, 0)).collect();
        let r = Simulator::new(p, &flows).unwrap().run().unwrap();
        assert!(r.drops > 0, "{cc}: expected overflow");
        assert!(r.retransmits > 0, "{cc}");
        assert!(r.flows.iter().all(|f| f.bytes == 2_000_000 && f.fct_ns > 0));
        // Six flows share one 400 Gb/s link: at least 6x one flow's ideal.
        assert!(r.last_ns >= 6 * r.ideal_ns, "{cc}");
    }
}

#[test]
fn ecn_marks_slow_cubic_down() {
    let flows: Vec<(usize, usize)> = (1..7).map(|s| (s, 0)).collect();
    let base = Params {
        chunk: 4096,
        bytes: 1_000_000,
        ..small(CcKind::Cubic)
    };
    let no_ecn = Simulator::new(base.clone(), &flows).unwrap().run().unwrap();
    let ecn = Simulator::new(
        Params {
            ecn_bytes: Some(32 * 1024),
            ..base
        },
        &flows,
    )
    .unwrap()
    .run()
    .unwrap();
    assert_eq!(no_ecn.ecn_marks, 0);
    assert!(ecn.ecn_marks > 0);
    assert!(
        ecn.max_queue_bytes < no_ecn.max_queue_bytes,
        "{} vs {}",
        ecn.max_queue_bytes,
        no_ecn.max_queue_bytes
    );
}
