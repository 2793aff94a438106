//! Host functions of NVIDIA's device API. libccl has no device-side API yet; these exist so
//! programs that reference them link, and they explain themselves through `ncclGetLastError`.

use std::ffi::{c_int, c_void};

use crate::{ncclComm_t, ncclResult_t, unsupported};

/// `ncclTeam_t`: three ints.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ncclTeam_t {
    pub nRanks: c_int,
    pub rank: c_int,
    pub stride: c_int,
}

/// `ncclMultimemHandle_t`: one pointer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclMultimemHandle_t {
    pub mcBasePtr: *mut c_void,
}

fn world(comm: ncclComm_t) -> ncclTeam_t {
    // SAFETY: forwarded caller contract; NULL gives an empty team.
    match unsafe { crate::comm_ref(comm) } {
        Ok(c) => ncclTeam_t {
            nRanks: c.nranks() as c_int,
            rank: c.rank() as c_int,
            stride: 1,
        },
        Err(_) => ncclTeam_t::default(),
    }
}

crate::api! {
fn ncclCommQueryProperties / pncclCommQueryProperties(comm: ncclComm_t, props: *mut c_void) -> ncclResult_t {
    let _ = (comm, props);
    unsupported("ncclCommQueryProperties (device API)")
}
fn ncclDevCommCreate / pncclDevCommCreate(comm: ncclComm_t, reqs: *const c_void, out_dev_comm: *mut c_void) -> ncclResult_t {
    let _ = (comm, reqs, out_dev_comm);
    unsupported("ncclDevCommCreate (device API)")
}
fn ncclDevCommDestroy / pncclDevCommDestroy(comm: ncclComm_t, dev_comm: *const c_void) -> ncclResult_t {
    let _ = (comm, dev_comm);
    unsupported("ncclDevCommDestroy (device API)")
}
fn ncclGetLsaDevicePointer / pncclGetLsaDevicePointer(window: *mut c_void, offset: usize, lsa_rank: c_int, out_ptr: *mut *mut c_void) -> ncclResult_t {
    let _ = (window, offset, lsa_rank, out_ptr);
    unsupported("ncclGetLsaDevicePointer (device API)")
}
fn ncclGetPeerDevicePointer / pncclGetPeerDevicePointer(window: *mut c_void, offset: usize, peer: c_int, out_ptr: *mut *mut c_void) -> ncclResult_t {
    let _ = (window, offset, peer, out_ptr);
    unsupported("ncclGetPeerDevicePointer (device API)")
}
fn ncclGetMultimemDevicePointer / pncclGetMultimemDevicePointer(window: *mut c_void, offset: usize, multimem: ncclMultimemHandle_t, out_ptr: *mut *mut c_void) -> ncclResult_t {
    let _ = (window, offset, multimem, out_ptr);
    unsupported("ncclGetMultimemDevicePointer (device API)")
}
fn ncclGetLsaMultimemDevicePointer / pncclGetLsaMultimemDevicePointer(window: *mut c_void, offset: usize, out_ptr: *mut *mut c_void) -> ncclResult_t {
    let _ = (window, offset, out_ptr);
    unsupported("ncclGetLsaMultimemDevicePointer (device API)")
}
fn ncclTeamWorld / pncclTeamWorld(comm: ncclComm_t) -> ncclTeam_t {
    world(comm)
}
fn ncclTeamLsa / pncclTeamLsa(comm: ncclComm_t) -> ncclTeam_t {
    // Every rank of a host-backend communicator is its own load/store domain.
    let w = world(comm);
    ncclTeam_t { nRanks: 1, rank: 0, stride: w.stride }
}
fn ncclTeamRail / pncclTeamRail(comm: ncclComm_t) -> ncclTeam_t {
    world(comm)
}
fn ncclTeamRankToWorld / pncclTeamRankToWorld(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int {
    let w = world(comm);
    if rank < 0 || rank >= team.nRanks {
        return -1;
    }
    w.rank + (rank - team.rank) * team.stride
}
fn ncclTeamRankToLsa / pncclTeamRankToLsa(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> c_int {
    let _ = (comm, team, rank);
    -1
}
fn ncclLsaBarrierCreateRequirement / pncclLsaBarrierCreateRequirement(team: ncclTeam_t, n_barriers: c_int, out_handle: *mut c_void, out_req: *mut c_void) -> ncclResult_t {
    let _ = (team, n_barriers, out_handle, out_req);
    unsupported("ncclLsaBarrierCreateRequirement (device API)")
}
fn ncclGinBarrierCreateRequirement / pncclGinBarrierCreateRequirement(comm: ncclComm_t, team: ncclTeam_t, n_barriers: c_int, out_handle: *mut c_void, out_req: *mut c_void) -> ncclResult_t {
    let _ = (comm, team, n_barriers, out_handle, out_req);
    unsupported("ncclGinBarrierCreateRequirement (device API)")
}
fn ncclLLA2ACreateRequirement / pncclLLA2ACreateRequirement(n_blocks: c_int, n_slots: c_int, out_handle: *mut c_void, out_req: *mut c_void) -> ncclResult_t {
    let _ = (n_blocks, n_slots, out_handle, out_req);
    unsupported("ncclLLA2ACreateRequirement (device API)")
}
fn ncclLLA2ACalcSlots / pncclLLA2ACalcSlots(max_elts: c_int, max_elt_size: c_int) -> c_int {
    let _ = (max_elts, max_elt_size);
    0
}
}
