export OUT
MPS=1 NGPU=2 NCCL_TESTS_DEVICE=0 REPS=3 timeout 280 bash tests/gpu/device_monitor.sh > $OUT/mon.txt 2>&1; cat $OUT/monitor.md
MPS=1 bash -c 'source tests/gpu/mps.sh; NGPU=8 NCCL_TESTS_DEVICE=0 LIBS="ccl=.dev" EXTRA="-e 64M -n 10 -w 2" timeout 280 bash tests/gpu/nccl_tests_ab.sh' > $OUT/eight.txt 2>&1
tail -n 30 $OUT/eight.txt; cat $OUT/nccltests/exits.txt
