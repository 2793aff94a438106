# Device calls of 2026-11-23 (nvidia-h100-x1), in order.
# 1: the driver probe and the hang as found (code af23c7b + the probe)
bash tests/gpu/device_two_comms_hang.sh
# 2: GPU unit tests, the preload's cold / warm time, two_comms one-GPU A/B
timeout 180 .dev/gpu_backend_test --test-threads=1
TWO_COMMS_ONE_GPU=1 NCCL_DEBUG=INFO /tmp/tc 20        # twice: cold, then warm disk cache
PROBE=0 RUNS=10 TAG=on_ bash tests/gpu/device_two_comms_hang.sh
CCL_KERNEL_PRELOAD=0 PROBE=0 RUNS=6 TAG=off_ bash tests/gpu/device_two_comms_hang.sh
# 3: more runs, and 10,000 iterations
PROBE=0 RUNS=40 LIMIT_S=8 TAG=on_ bash tests/gpu/device_two_comms_hang.sh
CCL_KERNEL_PRELOAD=0 PROBE=0 RUNS=20 LIMIT_S=8 TAG=off_ bash tests/gpu/device_two_comms_hang.sh
PROBE=0 RUNS=1 ITERS=10000 LIMIT_S=200 TAG=long_ bash tests/gpu/device_two_comms_hang.sh
