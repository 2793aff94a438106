# Session 28 device calls (nvidia-h100-x1, 16 CPUs; no two-GPU machine was lent: status at
# 21:09 UTC listed nvidia-h100-x1 and nvidia-h200 only). Each ran in the repository root with
# .dev carried (the working tree's release library at the time). Outputs: N-*.txt, N-logs.tgz.
# 1: the two-rank GPU all-reduce fold (then CCL_GPU_ALLREDUCE_FOLD_BYTES): correctness every
#    type x reduction (2 and 3 ranks), ring vs fold 8-128 MiB two rounds, sendrecv
bash docs/device-runs/2026-11-24-s28/call1.sh
# 2: fold for reduce-scatter and reduce (CCL_GPU_FOLD_BYTES, default 8 MiB): correctness,
#    ring vs fold two rounds, all-reduce 128 MiB once more
bash docs/device-runs/2026-11-24-s28/call2.sh
# 3: fold decided per operation (in groups): group_vs_lone.c with and without the fold, the
#    network path's nine-op check 8 B-128 MiB, every-size fold checks, all-reduce 128 MiB
bash docs/device-runs/2026-11-24-s28/call3.sh
# 4: hierarchical all-reduce, four ranks on the one GPU as two emulated hosts: checks and
#    hierarchical vs flat 8-128 MiB, two rounds
bash docs/device-runs/2026-11-24-s28/call4.sh
# 5: the wide fold (3-8 ranks, CCL_GPU_FOLD_WIDE): checks 3 and 4 ranks, ring vs fold
bash docs/device-runs/2026-11-24-s28/call5.sh
# call6.sh (hierarchical broadcast, uneven counts, NCCL_P2P_LEVEL=NVL/LOC) and x2_min.sh are
# prepared and were NOT run.
