//! Multi-process fault scenarios through the C ABI: a rank killed mid-collective, mismatched
//! collectives, a silent peer with `CCL_TIMEOUT_S`, `ncclCommAbort` from another thread, and a
//! garbage unique id. Every rank must end with the right `ncclResult_t`, in bounded time.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::undocumented_unsafe_blocks,
    clippy::needless_range_loop
)]

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SUCCESS: i64 = 0;
const SYSTEM_ERROR: i64 = 2;
const INVALID_ARGUMENT: i64 = 4;
const INVALID_USAGE: i64 = 5;
const REMOTE_ERROR: i64 = 6;

/// Where rank `r`'s stderr goes (a file, so a chatty rank can never block on a full pipe).
fn err_path(port: u16, r: usize) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ccl-faults-{port}-{r}.err"))
}

use ccl_tests::free_port;

struct RankOut {
    status: Option<i32>,
    fields: HashMap<String, String>,
    stdout: String,
    stderr: String,
}

/// Runs `n` ranks of `scenario`; kills everything still running after `limit`.
fn run(scenario: &str, n: usize, extra_env: &[(&str, &str)], limit: Duration) -> Vec<RankOut> {
    run_with(scenario, n, extra_env, &|_| Vec::new(), limit)
}

/// [`run`] with environment variables that differ per rank.
fn run_with(
    scenario: &str,
    n: usize,
    extra_env: &[(&str, &str)],
    per_rank: &dyn Fn(usize) -> Vec<(String, String)>,
    limit: Duration,
) -> Vec<RankOut> {
    let port = free_port();
    let mut children: Vec<_> = (0..n)
        .map(|r| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_ccl-testrank"));
            c.arg(scenario)
                .env("CCL_RANK", r.to_string())
                .env("CCL_NRANKS", n.to_string())
                .env("NCCL_COMM_ID", format!("127.0.0.1:{port}"))
                .env("NCCL_SOCKET_IFNAME", "lo")
                .env("CCL_BOOTSTRAP_TIMEOUT_S", "30")
                .stdout(Stdio::piped())
                .stderr(Stdio::from(
                    std::fs::File::create(err_path(port, r)).unwrap(),
                ));
            for (k, v) in extra_env {
                c.env(k, v);
            }
            for (k, v) in per_rank(r) {
                c.env(k, v);
            }
            c.spawn().unwrap()
        })
        .collect();
    let start = Instant::now();
    let mut outs: Vec<Option<RankOut>> = (0..n).map(|_| None).collect();
    while outs.iter().any(Option::is_none) {
        for (i, ch) in children.iter_mut().enumerate() {
            if outs[i].is_none() {
                if let Some(st) = ch.try_wait().unwrap() {
                    let mut s = String::new();
                    use std::io::Read;
                    ch.stdout.take().unwrap().read_to_string(&mut s).unwrap();
                    let err = std::fs::read_to_string(err_path(port, i)).unwrap_or_default();
                    let _ = std::fs::remove_file(err_path(port, i));
                    eprint!("{err}");
                    let fields = s
                        .lines()
                        .flat_map(|l| l.split_whitespace())
                        .filter_map(|kv| kv.split_once('='))
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect();
                    outs[i] = Some(RankOut {
                        status: st.code(),
                        fields,
                        stdout: s,
                        stderr: err,
                    });
                }
            }
        }
        if start.elapsed() > limit {
            for ch in children.iter_mut() {
                let _ = ch.kill();
            }
            panic!("scenario {scenario} hung: ranks still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    outs.into_iter().map(Option::unwrap).collect()
}

fn code(o: &RankOut, k: &str) -> i64 {
    o.fields
        .get(k)
        .unwrap_or_else(|| panic!("no {k} in {:?}", o.stdout))
        .parse()
        .unwrap()
}

/// With `hosts`, rank `r` counts as host `host<r>` (links between ranks then go over the
/// network: the multipath transport by default).
fn own_host(hosts: bool, r: usize) -> Vec<(String, String)> {
    if hosts {
        vec![("CCL_HOSTID".to_string(), format!("host{r}"))]
    } else {
        Vec::new()
    }
}

#[test]
fn killed_rank_turns_into_remote_or_system_error_for_the_others() {
    killed_rank(false);
}

/// The same over the multipath transport, the default between hosts: every rank its own host.
#[test]
fn killed_rank_on_another_host_turns_into_an_error_over_mpt() {
    killed_rank(true);
}

/// Four ranks on two hosts with every all-reduce hierarchical (`CCL_HIERARCHY=1`): a rank that
/// dies mid-stream breaks the stages on the sub-communicators, and each survivor gets the
/// error from its call and as its communicator's async error, well within the timeout (a
/// survivor whose stage failed aborts its sub-communicators, so one waiting for it in a later
/// stage fails at once too).
#[test]
fn killed_rank_under_a_hierarchical_all_reduce_turns_into_an_error_for_the_others() {
    let outs = run_with(
        "kill",
        4,
        &[
            ("CCL_TIMEOUT_S", "20"),
            ("NCCL_DEBUG", "INFO"),
            ("CCL_HIERARCHY", "1"),
        ],
        &two_per_host,
        Duration::from_secs(90),
    );
    assert_eq!(outs[3].status, Some(9), "the victim exits with 9");
    for o in &outs[..3] {
        assert!(
            o.stderr.contains("hierarchy: 2 ranks on this host"),
            "{}",
            o.stderr
        );
        survivor_failed(o);
        assert!(code(o, "elapsed_ms") < 10_000, "{}", o.stdout);
        // The message says which sub-communicator failed and what its ranks are here (its
        // own text names ranks by their place there), and leads to a rank that is gone.
        assert!(
            o.stdout.contains("in a hierarchical stage on the")
                && o.stdout
                    .contains("whose ranks 0.. are this communicator's [")
                && o.stdout.contains("is gone"),
            "{}",
            o.stdout
        );
    }
}

/// Rank `r` on host `r / 2`: two ranks a host.
fn two_per_host(r: usize) -> Vec<(String, String)> {
    vec![("CCL_HOSTID".to_string(), format!("host{}", r / 2))]
}

/// A survivor of a killed rank got a remote or system error from its call, the same as its
/// async error, before the 20 s timeout.
fn survivor_failed(o: &RankOut) {
    let r = code(o, "result");
    assert!(
        r == REMOTE_ERROR || r == SYSTEM_ERROR,
        "survivor got {r}: {}",
        o.stdout
    );
    assert_eq!(code(o, "async"), r, "async error is set: {}", o.stdout);
    assert!(code(o, "elapsed_ms") < 20_000, "{}", o.stdout);
}

fn killed_rank(hosts: bool) {
    let outs = run_with(
        "kill",
        3,
        &[("CCL_TIMEOUT_S", "20"), ("NCCL_DEBUG", "INFO")],
        &|r| own_host(hosts, r),
        Duration::from_secs(60),
    );
    assert_eq!(outs[2].status, Some(9), "the victim exits with 9");
    for o in &outs[..2] {
        if hosts {
            assert!(o.stderr.contains("links 0shm,0socket,2mpt"), "{}", o.stderr);
        }
        survivor_failed(o);
    }
}

#[test]
fn mismatched_collectives_fail_everywhere_without_hanging() {
    let outs = run(
        "mismatch",
        3,
        &[("CCL_TIMEOUT_S", "20")],
        Duration::from_secs(60),
    );
    let codes: Vec<i64> = outs.iter().map(|o| code(o, "result")).collect();
    assert!(
        codes.contains(&INVALID_USAGE),
        "some rank names the mismatch: {codes:?}"
    );
    for (o, c) in outs.iter().zip(&codes) {
        assert_ne!(*c, SUCCESS, "{}", o.stdout);
        assert!(
            o.stdout.contains("msg=") && !o.stdout.ends_with("msg=\n"),
            "{}",
            o.stdout
        );
    }
    assert!(
        outs.iter()
            .any(|o| o.stdout.contains("mismatched operations")),
        "{:?}",
        outs.iter().map(|o| &o.stdout).collect::<Vec<_>>()
    );
}

/// Under hierarchical all-reduces (four ranks, two hosts, `CCL_HIERARCHY=1`) a rank calling
/// another collective meets nobody on the communicator it called while the others wait in
/// stages on the sub-communicators: every rank fails by `CCL_TIMEOUT_S` (the mismatch shows
/// as a stuck operation there, not a hang).
#[test]
fn mismatched_collectives_under_a_hierarchy_fail_everywhere_by_the_timeout() {
    let outs = run_with(
        "mismatch",
        4,
        &[("CCL_TIMEOUT_S", "5"), ("CCL_HIERARCHY", "1")],
        &two_per_host,
        Duration::from_secs(60),
    );
    for o in &outs {
        let r = code(o, "result");
        assert_ne!(r, SUCCESS, "{}", o.stdout);
        assert!(code(o, "elapsed_ms") < 15_000, "{}", o.stdout);
    }
}

#[test]
fn silent_peer_times_out_with_ccl_timeout_s() {
    let outs = run(
        "silent",
        2,
        &[
            ("CCL_TIMEOUT_S", "3"),
            ("CCL_WARN_STUCK_S", "1"),
            ("NCCL_DEBUG", "WARN"),
        ],
        Duration::from_secs(60),
    );
    let o = &outs[0];
    assert!(
        o.stderr.contains("has made no progress") && o.stderr.contains("waiting on ranks [1]"),
        "the stuck-operation warning names the operation and the peer: {}",
        o.stderr
    );
    assert_eq!(code(o, "result"), SYSTEM_ERROR, "{}", o.stdout);
    let ms = code(o, "elapsed_ms");
    assert!(
        (3000..7000).contains(&ms),
        "timed out after {ms} ms: {}",
        o.stdout
    );
    assert!(o.stdout.contains("CCL_TIMEOUT_S"), "{}", o.stdout);
}

/// A peer silent in a control-plane exchange (a split here; init's exchanges are the same
/// receive) fails the others by `CCL_TIMEOUT_S`, not the bootstrap timeout: a peer whose
/// network died never closes its control connection (found with both NICs of a host cut
/// while the ranks were still initialising: the others waited the full 300 s).
#[test]
fn silent_peer_in_a_control_exchange_times_out_with_ccl_timeout_s() {
    let outs = run(
        "silent-split",
        2,
        &[("CCL_TIMEOUT_S", "3")],
        Duration::from_secs(60),
    );
    let o = &outs[0];
    assert_eq!(code(o, "result"), SYSTEM_ERROR, "{}", o.stdout);
    let ms = code(o, "elapsed_ms");
    assert!(
        (3000..7000).contains(&ms),
        "gave up after {ms} ms: {}",
        o.stdout
    );
    assert!(o.stdout.contains("sent nothing"), "{}", o.stdout);
}

#[test]
fn abort_from_another_thread_unblocks_a_stuck_collective() {
    let outs = run("abort", 2, &[], Duration::from_secs(60));
    let o = &outs[0];
    assert_eq!(code(o, "abort_result"), SUCCESS, "{}", o.stdout);
    assert_ne!(code(o, "result"), SUCCESS, "{}", o.stdout);
    assert!(code(o, "elapsed_ms") < 2500, "{}", o.stdout);
}

/// The same with the all-reduce hierarchical (four ranks, two hosts, `CCL_HIERARCHY=1`): rank
/// 0 is stuck in a stage on a sub-communicator, and aborting the communicator it called
/// reaches it there.
#[test]
fn abort_reaches_a_collective_stuck_in_a_hierarchical_stage() {
    let outs = run_with(
        "abort",
        4,
        &[("CCL_HIERARCHY", "1")],
        &two_per_host,
        Duration::from_secs(60),
    );
    let o = &outs[0];
    assert_eq!(code(o, "abort_result"), SUCCESS, "{}", o.stdout);
    assert_ne!(code(o, "result"), SUCCESS, "{}", o.stdout);
    assert!(code(o, "elapsed_ms") < 2500, "{}", o.stdout);
}

/// The grouped scenario on `n` ranks placed by `hosts`, every kind allowed to go
/// hierarchically (`CCL_HIERARCHY=1`, all-to-all too), each operation's decision traced;
/// `extra` adds settings.
fn run_grouped(
    n: usize,
    hosts: &dyn Fn(usize) -> Vec<(String, String)>,
    extra: &[(&str, &str)],
) -> Vec<RankOut> {
    let mut env = vec![
        ("CCL_HIERARCHY", "1"),
        ("CCL_HIERARCHY_ALLTOALL", "1"),
        ("CCL_TIMEOUT_S", "20"),
        ("NCCL_DEBUG", "TRACE"),
    ];
    env.extend_from_slice(extra);
    run_with("grouped", n, &env, hosts, Duration::from_secs(60))
}

/// Every rank of [`run_grouped`] got exact results, and its trace says the operations of
/// `hierarchical` went hierarchically and those of `flat` did not (kinds as `Coll(..)` prints
/// them).
fn assert_grouped(outs: &[RankOut], hierarchical: &[&str], flat: &[&str]) {
    for o in outs {
        assert_eq!(code(o, "result"), SUCCESS, "{}\n{}", o.stdout, o.stderr);
        let went = |kind: &str| o.stderr.contains(&format!("Coll({kind}) of"));
        for kind in hierarchical {
            assert!(went(kind), "{kind} not hierarchical:\n{}", o.stderr);
        }
        for kind in flat {
            assert!(!went(kind), "{kind} hierarchical:\n{}", o.stderr);
        }
    }
}

/// Hierarchical operations (four ranks, two hosts, `CCL_HIERARCHY=1`, all-to-all too; an
/// all-reduce of an uneven count among them, flat integer averages between them) that half the
/// ranks group and half call one by one: exact results everywhere, no hang.
#[test]
fn ranks_grouping_hierarchical_operations_differently_still_meet() {
    // Every kind went hierarchically (the integer averages, which must not, are checked exact
    // by the scenario: truncating per host would be off).
    let every = [
        "AllGather",
        "AllReduce",
        "Broadcast { root: 1 }",
        "ReduceScatter",
        "Reduce { root: 3 }",
        "AlltoAll",
        "Gather { root: 1 }",
        "Scatter { root: 2 }",
    ];
    assert_grouped(&run_grouped(4, &two_per_host, &[]), &every, &[]);
}

/// The grouped scenario on three ranks, hosts of two and one (as a shrink leaves them): rank 0
/// groups everything, the others call one by one; leaders and the rest run different numbers
/// of stages, flat operations (integer averages, the reduce-scatter and all-to-all, which stay
/// flat on uneven hosts) between hierarchical ones. Exact, no hang.
#[test]
fn uneven_hosts_grouped_differently_still_meet() {
    let hierarchical = [
        "AllGather",
        "AllReduce",
        "Broadcast { root: 1 }",
        "Reduce { root: 2 }",
        "Gather { root: 1 }",
        "Scatter { root: 2 }",
    ];
    let outs = run_grouped(3, &two_per_host, &[]);
    assert_grouped(&outs, &hierarchical, &["ReduceScatter", "AlltoAll"]);
}

/// The grouped scenario with hosts interleaved (ranks 0, 2 on one host, 1, 3 on the other):
/// the operations that need each host's ranks consecutive (reduce-scatter, all-to-all, gather,
/// scatter) stay flat among hierarchical ones; of each rank's two send/receive partners one is
/// on its host now (over the host's communicator), the other not. Exact, no hang.
#[test]
fn interleaved_hosts_grouped_differently_still_meet() {
    let alternate = |r: usize| vec![("CCL_HOSTID".to_string(), format!("host{}", r % 2))];
    let hierarchical = [
        "AllGather",
        "AllReduce",
        "Broadcast { root: 1 }",
        "Reduce { root: 3 }",
    ];
    let flat = [
        "ReduceScatter",
        "AlltoAll",
        "Gather { root: 1 }",
        "Scatter { root: 2 }",
    ];
    assert_grouped(&run_grouped(4, &alternate, &[]), &hierarchical, &flat);
}

/// `CCL_HIERARCHY_MIN_BYTES` as a boundary pair over the grouped scenario (blocks of 1 MiB:
/// the all-gather's, reduce-scatter's, all-to-all's, gather's and scatter's; 4 MiB for the
/// others): at 1 MiB every kind goes hierarchically; at 1 MiB + 1 the 1 MiB ones stay flat,
/// among hierarchical ones in the same groups, and every result is exact either way.
#[test]
fn hierarchy_min_bytes_takes_operations_of_exactly_that_size() {
    let big = ["AllReduce", "Broadcast { root: 1 }", "Reduce { root: 3 }"];
    let small = [
        "AllGather",
        "ReduceScatter",
        "AlltoAll",
        "Gather { root: 1 }",
        "Scatter { root: 2 }",
    ];
    let every: Vec<&str> = big.iter().chain(&small).copied().collect();
    let at = |min| run_grouped(4, &two_per_host, &[("CCL_HIERARCHY_MIN_BYTES", min)]);
    assert_grouped(&at("1048576"), &every, &[]);
    assert_grouped(&at("1048577"), &big, &small);
}

/// Communicators split off a hierarchical one (the whole again: hierarchical too, its log
/// says so; one per host: flat) run exact all-reduces.
#[test]
fn communicators_split_off_a_hierarchical_one_work() {
    let outs = run_with(
        "split",
        4,
        &[("CCL_HIERARCHY", "1"), ("NCCL_DEBUG", "INFO")],
        &two_per_host,
        Duration::from_secs(60),
    );
    for o in &outs {
        assert_eq!(code(o, "result"), SUCCESS, "{}\n{}", o.stdout, o.stderr);
        // The parent and the first child each made their two sub-communicators.
        let made = o.stderr.matches("hierarchy: 2 ranks on this host").count();
        assert_eq!(made, 2, "{}", o.stderr);
    }
}

#[test]
fn garbage_unique_id_is_an_invalid_argument() {
    let outs = run("garbage-id", 1, &[], Duration::from_secs(30));
    assert_eq!(
        code(&outs[0], "result"),
        INVALID_ARGUMENT,
        "{}",
        outs[0].stdout
    );
    assert!(outs[0].stdout.contains("unique id"), "{}", outs[0].stdout);
}

#[test]
fn ranks_on_different_hosts_are_ringed_by_host_and_use_the_network_between_hosts() {
    // Hosts A B A B: the topology search must put 0,2 and 1,3 next to each other; pairs on one
    // host use shared memory, the others the multipath transport by default, TCP with NCCL's
    // NCCL_NET=Socket. The "basic" scenario checks the results.
    for (net, links) in [
        ("", "links=1shm,0socket,2mpt"),
        ("Socket", "links=1shm,2socket"),
    ] {
        let outs = run_with(
            "basic",
            4,
            &[("NCCL_DEBUG", "INFO"), ("NCCL_NET", net)],
            &|r| {
                vec![(
                    "CCL_HOSTID".to_string(),
                    if r % 2 == 0 { "hostA" } else { "hostB" }.to_string(),
                )]
            },
            Duration::from_secs(60),
        );
        for o in &outs {
            assert_eq!(code(o, "result"), SUCCESS, "NCCL_NET={net:?}: {}", o.stdout);
            assert!(o.stdout.contains(links), "NCCL_NET={net:?}: {}", o.stdout);
        }
        assert!(
            outs[0].stdout.contains("ring=0,2,1,3") || outs[0].stdout.contains("ring=0,2,3,1"),
            "{}",
            outs[0].stdout
        );
    }
}

#[test]
fn survivors_shrink_a_dead_rank_away_and_keep_working() {
    survivors_shrink(false);
}

/// The same with every rank on its own host: the links are the multipath transport.
#[test]
fn survivors_on_other_hosts_shrink_a_dead_rank_away_over_mpt() {
    survivors_shrink(true);
}

/// Four ranks on two hosts with hierarchical operations (`CCL_HIERARCHY=1`); the last dies and
/// the survivors shrink it away: their communicator's hosts hold two ranks and one, and it is
/// hierarchical still (each host's first rank across the hosts), its all-reduce exact.
#[test]
fn survivors_shrinking_a_host_to_one_rank_stay_hierarchical() {
    let outs = run_with(
        "shrink",
        4,
        &[
            ("CCL_TIMEOUT_S", "20"),
            ("CCL_HIERARCHY", "1"),
            ("NCCL_DEBUG", "TRACE"),
        ],
        &two_per_host,
        Duration::from_secs(60),
    );
    assert_eq!(outs[3].status, Some(9));
    for (i, o) in outs[..3].iter().enumerate() {
        assert_eq!(code(o, "shrink"), SUCCESS, "{}", o.stdout);
        assert_eq!(code(o, "newcount"), 3, "{}", o.stdout);
        assert_eq!(code(o, "newrank"), i as i64, "{}", o.stdout);
        assert_eq!(code(o, "after"), SUCCESS, "{}\n{}", o.stdout, o.stderr);
        // Rank 0 waits in the all-reduce's last stage for rank 1, whose cross stage met the
        // dead rank: it fails when rank 1 aborts its sub-communicators, not at the timeout.
        assert!(code(o, "elapsed_ms") < 10_000, "{}", o.stdout);
        // The parent's hierarchy, then the shrunk one's (rank 2 alone on its host now).
        let alone = o
            .stderr
            .matches("hierarchy: 1 ranks on this host (index 0), 2 hosts");
        assert_eq!(alone.count(), usize::from(i == 2), "{}", o.stderr);
        assert_eq!(o.stderr.matches("hierarchy: ").count(), 2, "{}", o.stderr);
        // The all-reduce every scenario starts with, the one that failed, then the shrunk
        // communicator's.
        let hierarchical = o.stderr.matches("Coll(AllReduce) of").count();
        assert_eq!(hierarchical, 3, "{}", o.stderr);
    }
}

/// `ncclCommRevoke` from another thread ends an all-reduce that waits on a silent rank (long
/// before `CCL_TIMEOUT_S`), leaves the communicator reporting success and refusing operations
/// (`ncclInvalidUsage`, finalize too; a second revoke and unknown flags `ncclInvalidArgument`),
/// and the survivors shrink the silent rank away with `NCCL_SHRINK_DEFAULT` and carry on exact.
#[test]
fn a_revoke_ends_the_work_in_flight_and_the_survivors_shrink() {
    let outs = run_with(
        "revoke",
        3,
        &[("CCL_TIMEOUT_S", "20")],
        &|_| Vec::new(),
        Duration::from_secs(60),
    );
    for o in &outs[..2] {
        assert_eq!(code(o, "bad_flags"), INVALID_ARGUMENT, "{}", o.stdout);
        assert_ne!(code(o, "failed"), SUCCESS, "{}", o.stdout);
        assert!(code(o, "waited_ms") < 5_000, "{}", o.stdout);
        assert_eq!(code(o, "revoked"), SUCCESS, "{}", o.stdout);
        assert_eq!(code(o, "state"), SUCCESS, "{}", o.stdout);
        assert_eq!(code(o, "again"), INVALID_ARGUMENT, "{}", o.stdout);
        assert_eq!(code(o, "refused"), INVALID_USAGE, "{}", o.stdout);
        assert_eq!(code(o, "finalized"), INVALID_USAGE, "{}", o.stdout);
        assert_eq!(code(o, "shrink"), SUCCESS, "{}\n{}", o.stdout, o.stderr);
        assert_eq!(code(o, "after"), SUCCESS, "{}", o.stdout);
    }
}

/// A revoked communicator still splits: every rank revokes, then splits, and the child's
/// all-reduce is exact.
#[test]
fn a_revoked_communicator_still_splits() {
    let outs = run_with(
        "revoke-split",
        3,
        &[],
        &|_| Vec::new(),
        Duration::from_secs(60),
    );
    for o in &outs {
        assert_eq!(code(o, "revoked"), SUCCESS, "{}", o.stdout);
        assert_eq!(code(o, "split"), SUCCESS, "{}\n{}", o.stdout, o.stderr);
        assert_eq!(code(o, "after"), SUCCESS, "{}", o.stdout);
    }
}

/// `ncclCommGrow`: two ranks grow their communicator to three, the new rank joining with the
/// coordinator's `ncclCommGetUniqueId`; old ranks keep their ranks, the grown all-reduce
/// counts all three; an old rank naming a rank, or a grow that does not grow, is
/// `ncclInvalidArgument`.
#[test]
fn a_communicator_grows_by_a_rank() {
    let outs = run_with("grow", 3, &[], &|_| Vec::new(), Duration::from_secs(60));
    for (i, o) in outs.iter().enumerate() {
        if i < 2 {
            assert_eq!(code(o, "bad_rank"), INVALID_ARGUMENT, "{}", o.stdout);
            assert_eq!(code(o, "no_growth"), INVALID_ARGUMENT, "{}", o.stdout);
        }
        assert_eq!(code(o, "grow"), SUCCESS, "{}\n{}", o.stdout, o.stderr);
        assert_eq!(code(o, "newcount"), 3, "{}", o.stdout);
        assert_eq!(code(o, "newrank"), i as i64, "{}", o.stdout);
        assert_eq!(code(o, "after"), SUCCESS, "{}", o.stdout);
    }
}

fn survivors_shrink(hosts: bool) {
    let outs = run_with(
        "shrink",
        3,
        &[("CCL_TIMEOUT_S", "20"), ("NCCL_DEBUG", "INFO")],
        &|r| own_host(hosts, r),
        Duration::from_secs(60),
    );
    if hosts {
        assert!(
            outs[0].stderr.contains("links 0shm,0socket,2mpt"),
            "{}",
            outs[0].stderr
        );
    }
    assert_eq!(outs[2].status, Some(9));
    for (i, o) in outs[..2].iter().enumerate() {
        let failed = code(o, "failed");
        assert!(
            failed == REMOTE_ERROR || failed == SYSTEM_ERROR,
            "{}",
            o.stdout
        );
        assert_eq!(code(o, "shrink"), SUCCESS, "{}", o.stdout);
        assert_eq!(code(o, "newcount"), 2, "{}", o.stdout);
        assert_eq!(code(o, "newrank"), i as i64, "{}", o.stdout);
        assert_eq!(
            code(o, "after"),
            SUCCESS,
            "allreduce on the shrunk communicator: {}",
            o.stdout
        );
    }
}
