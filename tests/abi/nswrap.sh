#!/bin/sh
# tests/abi/nswrap.sh CMD... -- run one MPI rank inside its network namespace, as its own "host".
#
# Used by run.sh as: mpirun ... tests/abi/nswrap.sh target/abi/coll_check
# Rank r goes to namespace cclns$((r / CCL_RANKS_PER_NS)) (default 2 ranks per namespace), made
# by scripts/netns.sh. Inside, it also gets its own UTS namespace with hostname = the namespace
# name, and NCCL_HOSTID = the namespace name, so the library sees ranks in different
# namespaces as different hosts (TCP between them) and ranks in one namespace as one host
# (shared memory between them). OMPI_COMM_WORLD_RANK is set by OpenMPI's mpirun.
set -e
per=${CCL_RANKS_PER_NS:-2}
rank=${OMPI_COMM_WORLD_RANK:?nswrap.sh must be started by OpenMPI mpirun}
ns="cclns$((rank / per))"
export NCCL_HOSTID="$ns"
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
