# Session 29 call 8 (nvidia-h100-x1, carry .dev = HEAD 9e0281e release: cuda-ipc's one logical
# clock per group): the one-GPU regression round (tests/gpu/device_one_gpu.sh, RUNS=4), its
# summary and logs under $OUT.
RUNS=4 OUT=$OUT bash tests/gpu/device_one_gpu.sh > $OUT/round.txt 2>&1; echo "round rc $?"
cat $OUT/summary.md
