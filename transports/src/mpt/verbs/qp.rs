//! The queue-pair state machine as data: which `ibv_modify_qp` calls bring a UC or RC queue
//! pair from RESET to RTS, with exactly the attribute mask the verbs rules require
//! (`man ibv_modify_qp`, IBTA vol. 1 section 11.2.5.3):
//!
//! | transition   | UC                                          | RC adds                                   |
//! |--------------|---------------------------------------------|-------------------------------------------|
//! | RESET->INIT  | STATE, PKEY_INDEX, PORT, ACCESS_FLAGS        | —                                         |
//! | INIT->RTR    | STATE, AV, PATH_MTU, DEST_QPN, RQ_PSN        | MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER         |
//! | RTR->RTS     | STATE, SQ_PSN                                | TIMEOUT, RETRY_CNT, RNR_RETRY, MAX_QP_RD_ATOMIC |
//! | any->ERR     | STATE                                        | —                                         |
//! | any->RESET   | STATE                                        | —                                         |
//!
//! UC has no acknowledgements, so no retry, timeout or RDMA-read resources; UC also cannot
//! serve RDMA reads, so its access flags are LOCAL_WRITE | REMOTE_WRITE only.
//!
//! *UC -> RC fallback.* Some providers refuse UC queue pairs (iWARP, EFA, some RoCE
//! firmware): `ibv_create_qp` or the RTR transition fails with `EINVAL`/`EOPNOTSUPP`/
//! `ENOSYS`. Both ends must use the same type, so each advertises what it managed to create
//! and [`QpKind::negotiate`] picks UC only when both can. [`QpKind::fallback`] and
//! [`is_uc_refusal`] drive the local retry.

use std::ffi::c_int;

use super::ffi::{self, IbvAhAttr, IbvGid, IbvGlobalRoute, IbvQpAttr};
use super::VerbsError;

/// Queue-pair transport type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpKind {
    /// Unreliable connected: write-with-immediate, no hardware retransmission (the
    /// multipath core does loss recovery). Preferred.
    Uc,
    /// Reliable connected: the fallback where UC is refused.
    Rc,
}

impl QpKind {
    /// `enum ibv_qp_type` value.
    pub fn ibv_type(self) -> u32 {
        match self {
            QpKind::Uc => ffi::QPT_UC,
            QpKind::Rc => ffi::QPT_RC,
        }
    }

    /// What to try after this kind was refused: UC falls back to RC, RC has no fallback.
    pub fn fallback(self) -> Option<QpKind> {
        match self {
            QpKind::Uc => Some(QpKind::Rc),
            QpKind::Rc => None,
        }
    }

    /// The kind both ends use: UC only if both could create it.
    pub fn negotiate(local: QpKind, remote: QpKind) -> QpKind {
        if local == QpKind::Uc && remote == QpKind::Uc {
            QpKind::Uc
        } else {
            QpKind::Rc
        }
    }
}

/// Whether a failed UC create/modify (its errno) means "this provider has no UC": fall back.
pub fn is_uc_refusal(errno: i32) -> bool {
    errno == libc::EINVAL || errno == libc::EOPNOTSUPP || errno == libc::ENOSYS
}

/// Queue-pair states the datapath uses (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    /// `IBV_QPS_RESET` (0).
    Reset,
    /// `IBV_QPS_INIT` (1).
    Init,
    /// `IBV_QPS_RTR` (2): ready to receive.
    Rtr,
    /// `IBV_QPS_RTS` (3): ready to send.
    Rts,
    /// `IBV_QPS_ERR` (6).
    Err,
}

impl QpState {
    /// `enum ibv_qp_state` value.
    pub fn ibv_state(self) -> u32 {
        match self {
            QpState::Reset => 0,
            QpState::Init => 1,
            QpState::Rtr => 2,
            QpState::Rts => 3,
            QpState::Err => 6,
        }
    }
}

/// Link layer of the port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand: routed by LID, GRH only across subnets.
    Infiniband,
    /// Ethernet (RoCE): always a GRH, addressed by GID.
    Ethernet,
}

/// What one end of a connection tells the other (and knows about itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpEndpoint {
    /// Queue-pair number (24 bits).
    pub qpn: u32,
    /// First packet sequence number this end sends (24 bits).
    pub psn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Chosen GID (see [`gid`](super::gid)).
    pub gid: [u8; 16],
    /// Index of that GID in the local table (used as the local `sgid_index`).
    pub gid_index: u8,
    /// Physical port number (1-based).
    pub port: u8,
    /// Active MTU as `enum ibv_mtu` (1 = 256 B .. 5 = 4096 B).
    pub mtu: u32,
    /// Link layer.
    pub link_layer: LinkLayer,
}

/// Tunables, with NCCL's environment names and defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IbParams {
    /// `NCCL_IB_TIMEOUT` (default 20): local ACK timeout, 4.096 us * 2^timeout (1..=31).
    pub timeout: u8,
    /// `NCCL_IB_RETRY_CNT` (default 7, 0..=7).
    pub retry_cnt: u8,
    /// RNR retry count (7 = infinite).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code (12 = 0.64 ms, as NCCL).
    pub min_rnr_timer: u8,
    /// Outstanding RDMA reads/atomics, both directions (1, as NCCL).
    pub rd_atomic: u8,
    /// `NCCL_IB_SL` (default 0, 0..=15).
    pub sl: u8,
    /// `NCCL_IB_TC` (default 0).
    pub traffic_class: u8,
    /// `NCCL_IB_PKEY` (default 0): P_Key index.
    pub pkey_index: u16,
    /// GRH hop limit (255).
    pub hop_limit: u8,
}

impl Default for IbParams {
    fn default() -> Self {
        IbParams {
            timeout: 20,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            rd_atomic: 1,
            sl: 0,
            traffic_class: 0,
            pkey_index: 0,
            hop_limit: 255,
        }
    }
}

fn parse_env<T: TryFrom<u64>>(
    lookup: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    default: T,
    max: u64,
    min: u64,
) -> Result<T, VerbsError> {
    let Some(raw) = lookup(name) else {
        return Ok(default);
    };
    let bad = || VerbsError::InvalidParam {
        name,
        value: raw.clone(),
    };
    let v: u64 = raw.trim().parse().map_err(|_| bad())?;
    if v < min || v > max {
        return Err(bad());
    }
    T::try_from(v).map_err(|_| bad())
}

impl IbParams {
    /// Reads the parameters from the process environment.
    pub fn from_env() -> Result<IbParams, VerbsError> {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }

    /// Reads the parameters through `lookup` (the environment, or a map in tests).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Result<IbParams, VerbsError> {
        let d = IbParams::default();
        Ok(IbParams {
            timeout: parse_env(lookup, "NCCL_IB_TIMEOUT", d.timeout, 31, 1)?,
            retry_cnt: parse_env(lookup, "NCCL_IB_RETRY_CNT", d.retry_cnt, 7, 0)?,
            sl: parse_env(lookup, "NCCL_IB_SL", d.sl, 15, 0)?,
            traffic_class: parse_env(lookup, "NCCL_IB_TC", d.traffic_class, 255, 0)?,
            pkey_index: parse_env(lookup, "NCCL_IB_PKEY", d.pkey_index, 0xffff, 0)?,
            ..d
        })
    }
}

/// One `ibv_modify_qp` call: target state, mask, attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpStep {
    /// State after the call.
    pub state: QpState,
    /// `attr_mask` (`IBV_QP_*` bits).
    pub mask: c_int,
    /// Attributes; fields outside `mask` are zero.
    pub attr: IbvQpAttr,
}

/// Builds queue-pair transitions from the tunables.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpPlan {
    /// Tunables.
    pub params: IbParams,
}

const PSN_MASK: u32 = 0x00ff_ffff;

impl QpPlan {
    /// A plan with these tunables.
    pub fn new(params: IbParams) -> QpPlan {
        QpPlan { params }
    }

    /// The mask the verbs rules require for `from -> to` on `kind`, or `None` where the
    /// transition is not one the datapath makes (see the module table).
    pub fn required_mask(kind: QpKind, from: QpState, to: QpState) -> Option<c_int> {
        use ffi::*;
        let rc = kind == QpKind::Rc;
        match (from, to) {
            (_, QpState::Err) | (_, QpState::Reset) => Some(QP_STATE),
            (QpState::Reset, QpState::Init) => {
                Some(QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS)
            }
            (QpState::Init, QpState::Rtr) => {
                let uc = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN;
                Some(if rc {
                    uc | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER
                } else {
                    uc
                })
            }
            (QpState::Rtr, QpState::Rts) => {
                let uc = QP_STATE | QP_SQ_PSN;
                Some(if rc {
                    uc | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC
                } else {
                    uc
                })
            }
            _ => None,
        }
    }

    /// RESET -> INIT -> RTR -> RTS for a queue pair of `kind` connecting `local` to `remote`.
    pub fn transitions(
        &self,
        kind: QpKind,
        local: &QpEndpoint,
        remote: &QpEndpoint,
    ) -> Result<Vec<QpStep>, VerbsError> {
        Ok(vec![
            self.step(kind, QpState::Reset, QpState::Init, local, remote)?,
            self.step(kind, QpState::Init, QpState::Rtr, local, remote)?,
            self.step(kind, QpState::Rtr, QpState::Rts, local, remote)?,
        ])
    }

    /// Moving any queue pair to ERR (flushes outstanding work requests) — the first step of
    /// tearing down or re-establishing a path.
    pub fn to_error() -> QpStep {
        QpStep {
            state: QpState::Err,
            mask: ffi::QP_STATE,
            attr: IbvQpAttr {
                qp_state: QpState::Err.ibv_state(),
                ..IbvQpAttr::default()
            },
        }
    }

    /// ERR -> RESET, after which [`transitions`](Self::transitions) can run again (e.g. with
    /// a re-resolved GID).
    pub fn to_reset() -> QpStep {
        QpStep {
            state: QpState::Reset,
            mask: ffi::QP_STATE,
            attr: IbvQpAttr::default(),
        }
    }

    /// One transition with its attributes.
    pub fn step(
        &self,
        kind: QpKind,
        from: QpState,
        to: QpState,
        local: &QpEndpoint,
        remote: &QpEndpoint,
    ) -> Result<QpStep, VerbsError> {
        let mask = Self::required_mask(kind, from, to)
            .ok_or(VerbsError::InvalidTransition { from, to })?;
        self.validate(local, remote)?;
        let p = &self.params;
        let rc = kind == QpKind::Rc;
        let mut a = IbvQpAttr {
            qp_state: to.ibv_state(),
            ..IbvQpAttr::default()
        };
        match (from, to) {
            (QpState::Reset, QpState::Init) => {
                a.pkey_index = p.pkey_index;
                a.port_num = local.port;
                a.qp_access_flags = if rc {
                    ffi::ACCESS_LOCAL_WRITE | ffi::ACCESS_REMOTE_WRITE | ffi::ACCESS_REMOTE_READ
                } else {
                    ffi::ACCESS_LOCAL_WRITE | ffi::ACCESS_REMOTE_WRITE
                };
            }
            (QpState::Init, QpState::Rtr) => {
                a.path_mtu = local.mtu.min(remote.mtu);
                a.dest_qp_num = remote.qpn;
                a.rq_psn = remote.psn;
                a.ah_attr = self.address_handle(local, remote);
                if rc {
                    a.max_dest_rd_atomic = p.rd_atomic;
                    a.min_rnr_timer = p.min_rnr_timer;
                }
            }
            (QpState::Rtr, QpState::Rts) => {
                a.sq_psn = local.psn;
                if rc {
                    a.timeout = p.timeout;
                    a.retry_cnt = p.retry_cnt;
                    a.rnr_retry = p.rnr_retry;
                    a.max_rd_atomic = p.rd_atomic;
                }
            }
            _ => {}
        }
        Ok(QpStep {
            state: to,
            mask,
            attr: a,
        })
    }

    fn validate(&self, local: &QpEndpoint, remote: &QpEndpoint) -> Result<(), VerbsError> {
        let bad = |name: &'static str, v: u64| {
            Err(VerbsError::InvalidParam {
                name,
                value: v.to_string(),
            })
        };
        for e in [local, remote] {
            if e.qpn & !PSN_MASK != 0 {
                return bad("qpn", u64::from(e.qpn));
            }
            if e.psn & !PSN_MASK != 0 {
                return bad("psn", u64::from(e.psn));
            }
            if !(1..=5).contains(&e.mtu) {
                return bad("mtu", u64::from(e.mtu));
            }
        }
        if local.port == 0 {
            return bad("port", 0);
        }
        if local.link_layer != remote.link_layer {
            return bad("link_layer (ends differ)", 0);
        }
        let p = &self.params;
        if !(1..=31).contains(&p.timeout) {
            return bad("timeout", u64::from(p.timeout));
        }
        if p.retry_cnt > 7 {
            return bad("retry_cnt", u64::from(p.retry_cnt));
        }
        if p.rnr_retry > 7 {
            return bad("rnr_retry", u64::from(p.rnr_retry));
        }
        if p.min_rnr_timer > 31 {
            return bad("min_rnr_timer", u64::from(p.min_rnr_timer));
        }
        if p.sl > 15 {
            return bad("sl", u64::from(p.sl));
        }
        Ok(())
    }

    /// The address vector for RTR: RoCE always routes by GRH (GID); InfiniBand by LID,
    /// with a GRH only when the peer is in another subnet (different GID prefix).
    pub fn address_handle(&self, local: &QpEndpoint, remote: &QpEndpoint) -> IbvAhAttr {
        let p = &self.params;
        let grh = IbvGlobalRoute {
            dgid: IbvGid { raw: remote.gid },
            flow_label: 0,
            sgid_index: local.gid_index,
            hop_limit: p.hop_limit,
            traffic_class: p.traffic_class,
        };
        let mut ah = IbvAhAttr {
            sl: p.sl,
            port_num: local.port,
            ..IbvAhAttr::default()
        };
        let global = match local.link_layer {
            LinkLayer::Ethernet => true,
            LinkLayer::Infiniband => local.gid[..8] != remote.gid[..8],
        };
        if local.link_layer == LinkLayer::Infiniband {
            ah.dlid = remote.lid;
        }
        if global {
            ah.is_global = 1;
            ah.grh = grh;
        }
        ah
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::mpt::verbs::ffi::*;
    use std::collections::HashMap;

    fn roce(qpn: u32, psn: u32, last: u8, mtu: u32) -> QpEndpoint {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&[10, 0, 0, last]);
        QpEndpoint {
            qpn,
            psn,
            lid: 0,
            gid,
            gid_index: 3,
            port: 1,
            mtu,
            link_layer: LinkLayer::Ethernet,
        }
    }

    fn ib(qpn: u32, lid: u16, prefix: u8) -> QpEndpoint {
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[7] = prefix;
        gid[15] = lid as u8;
        QpEndpoint {
            qpn,
            psn: 0x1234,
            lid,
            gid,
            gid_index: 0,
            port: 1,
            mtu: 5,
            link_layer: LinkLayer::Infiniband,
        }
    }

    #[test]
    fn rc_transitions_follow_the_verbs_rules() {
        let plan = QpPlan::default();
        let (l, r) = (roce(0x11, 0xabc, 1, 5), roce(0x22, 0xdef, 2, 3));
        let steps = plan.transitions(QpKind::Rc, &l, &r).unwrap();
        let states: Vec<_> = steps.iter().map(|s| s.state).collect();
        assert_eq!(states, [QpState::Init, QpState::Rtr, QpState::Rts]);

        let init = &steps[0];
        assert_eq!(
            init.mask,
            QP_STATE | QP_PKEY_INDEX | QP_PORT | QP_ACCESS_FLAGS
        );
        assert_eq!(init.attr.qp_state, 1);
        assert_eq!(init.attr.port_num, 1);
        assert_ne!(init.attr.qp_access_flags & ACCESS_REMOTE_WRITE, 0);

        let rtr = &steps[1];
        for bit in [
            QP_STATE,
            QP_AV,
            QP_PATH_MTU,
            QP_DEST_QPN,
            QP_RQ_PSN,
            QP_MAX_DEST_RD_ATOMIC,
            QP_MIN_RNR_TIMER,
        ] {
            assert_ne!(rtr.mask & bit, 0, "RC RTR lacks {bit:#x}");
        }
        assert_eq!(rtr.attr.qp_state, 2);
        assert_eq!(rtr.attr.path_mtu, 3, "path MTU is the smaller of the two");
        assert_eq!(rtr.attr.dest_qp_num, 0x22);
        assert_eq!(rtr.attr.rq_psn, 0xdef, "RQ PSN is the remote's send PSN");
        assert_eq!(rtr.attr.max_dest_rd_atomic, 1);
        assert_eq!(rtr.attr.min_rnr_timer, 12);
        assert_eq!(rtr.attr.ah_attr.is_global, 1, "RoCE always has a GRH");
        assert_eq!(rtr.attr.ah_attr.grh.dgid.raw, r.gid);
        assert_eq!(rtr.attr.ah_attr.grh.sgid_index, 3);
        assert_eq!(rtr.attr.ah_attr.grh.hop_limit, 255);

        let rts = &steps[2];
        assert_eq!(
            rts.mask,
            QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC
        );
        assert_eq!(rts.attr.qp_state, 3);
        assert_eq!(rts.attr.sq_psn, 0xabc);
        assert_eq!(rts.attr.timeout, 20);
        assert_eq!(rts.attr.retry_cnt, 7);
        assert_eq!(rts.attr.rnr_retry, 7);
        assert_eq!(rts.attr.max_rd_atomic, 1);
    }

    #[test]
    fn uc_needs_no_ack_or_read_resources() {
        let plan = QpPlan::default();
        let (l, r) = (roce(1, 2, 1, 5), roce(3, 4, 2, 5));
        let steps = plan.transitions(QpKind::Uc, &l, &r).unwrap();
        assert_eq!(
            steps[0].attr.qp_access_flags,
            ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE,
            "UC cannot serve RDMA reads"
        );
        let rtr = &steps[1];
        assert_eq!(
            rtr.mask,
            QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN
        );
        assert_eq!(rtr.attr.max_dest_rd_atomic, 0);
        assert_eq!(rtr.attr.min_rnr_timer, 0);
        let rts = &steps[2];
        assert_eq!(rts.mask, QP_STATE | QP_SQ_PSN);
        assert_eq!(
            (rts.attr.timeout, rts.attr.retry_cnt, rts.attr.rnr_retry),
            (0, 0, 0)
        );
        assert_eq!(rts.attr.sq_psn, 2);
    }

    #[test]
    fn every_step_sets_only_masked_fields_and_matches_required_mask() {
        let plan = QpPlan::default();
        let (l, r) = (roce(1, 2, 1, 5), roce(3, 4, 2, 5));
        for kind in [QpKind::Uc, QpKind::Rc] {
            let mut from = QpState::Reset;
            for s in plan.transitions(kind, &l, &r).unwrap() {
                assert_eq!(Some(s.mask), QpPlan::required_mask(kind, from, s.state));
                from = s.state;
            }
            assert_eq!(from, QpState::Rts);
        }
    }

    #[test]
    fn infiniband_routes_by_lid_and_adds_grh_across_subnets() {
        let plan = QpPlan::default();
        let ah = plan.address_handle(&ib(1, 7, 0), &ib(2, 9, 0));
        assert_eq!((ah.dlid, ah.is_global), (9, 0));
        let ah = plan.address_handle(&ib(1, 7, 0), &ib(2, 9, 1));
        assert_eq!((ah.dlid, ah.is_global), (9, 1));
    }

    #[test]
    fn invalid_transitions_and_values_are_refused() {
        let plan = QpPlan::default();
        let (l, r) = (roce(1, 2, 1, 5), roce(3, 4, 2, 5));
        assert!(matches!(
            plan.step(QpKind::Rc, QpState::Reset, QpState::Rts, &l, &r),
            Err(VerbsError::InvalidTransition { .. })
        ));
        assert!(plan
            .step(QpKind::Rc, QpState::Init, QpState::Init, &l, &r)
            .is_err());
        let mut bad = r;
        bad.psn = 1 << 24;
        assert!(plan.transitions(QpKind::Uc, &l, &bad).is_err());
        let mut bad = r;
        bad.mtu = 6;
        assert!(plan.transitions(QpKind::Uc, &l, &bad).is_err());
        let mut bad = r;
        bad.link_layer = LinkLayer::Infiniband;
        assert!(plan.transitions(QpKind::Uc, &l, &bad).is_err());
        let p = QpPlan::new(IbParams {
            timeout: 0,
            ..IbParams::default()
        });
        assert!(p.transitions(QpKind::Rc, &l, &r).is_err());
        assert_eq!(QpPlan::to_error().mask, QP_STATE);
        assert_eq!(QpPlan::to_error().attr.qp_state, 6);
        assert_eq!(QpPlan::to_reset().attr.qp_state, 0);
    }

    #[test]
    fn env_parameters_use_nccl_names_and_defaults() {
        let none = IbParams::from_lookup(&|_| None).unwrap();
        assert_eq!((none.timeout, none.retry_cnt), (20, 7));
        let env: HashMap<&str, &str> = [
            ("NCCL_IB_TIMEOUT", "22"),
            ("NCCL_IB_RETRY_CNT", "3"),
            ("NCCL_IB_SL", "5"),
            ("NCCL_IB_TC", "106"),
        ]
        .into();
        let p = IbParams::from_lookup(&|k| env.get(k).map(|s| s.to_string())).unwrap();
        assert_eq!(
            (p.timeout, p.retry_cnt, p.sl, p.traffic_class),
            (22, 3, 5, 106)
        );
        let rts = QpPlan::new(p)
            .step(
                QpKind::Rc,
                QpState::Rtr,
                QpState::Rts,
                &roce(1, 2, 1, 5),
                &roce(3, 4, 2, 5),
            )
            .unwrap();
        assert_eq!((rts.attr.timeout, rts.attr.retry_cnt), (22, 3));
        for (k, v) in [
            ("NCCL_IB_TIMEOUT", "32"),
            ("NCCL_IB_TIMEOUT", "0"),
            ("NCCL_IB_RETRY_CNT", "8"),
            ("NCCL_IB_TIMEOUT", "x"),
        ] {
            let r = IbParams::from_lookup(&|q| (q == k).then(|| v.to_string()));
            assert!(matches!(r, Err(VerbsError::InvalidParam { .. })), "{k}={v}");
        }
    }

    #[test]
    fn uc_falls_back_to_rc_and_both_ends_agree() {
        assert_eq!(QpKind::Uc.fallback(), Some(QpKind::Rc));
        assert_eq!(QpKind::Rc.fallback(), None);
        assert_eq!(QpKind::negotiate(QpKind::Uc, QpKind::Uc), QpKind::Uc);
        assert_eq!(QpKind::negotiate(QpKind::Uc, QpKind::Rc), QpKind::Rc);
        assert_eq!(QpKind::negotiate(QpKind::Rc, QpKind::Uc), QpKind::Rc);
        assert!(is_uc_refusal(libc::EOPNOTSUPP));
        assert!(is_uc_refusal(libc::EINVAL));
        assert!(!is_uc_refusal(libc::ENOMEM));
        assert_eq!(QpKind::Uc.ibv_type(), 3);
        assert_eq!(QpKind::Rc.ibv_type(), 2);
    }
}
