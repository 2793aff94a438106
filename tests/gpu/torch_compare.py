"""Compares two torch_check.py runs: python3 torch_compare.py DIR TAG_A TAG_B NRANKS

Every result must be bitwise equal with 2 ranks (a two-rank sum is one a + b, the same in any
order) and, for any rank count, for pure data movement (broadcast, all-gather, all-to-all,
send/recv, gather, scatter) and the order-free reductions max and min.

With more than 2 ranks the libraries may legitimately add in different orders, so results that
are sums (all-reduce sum/avg/product, reduce, reduce-scatter, and the DDP losses trained from
them) pass when close: |a - b| <= rtol * (|b| + max|b|) elementwise, the max taken over the
tensor (the second term covers elements where a sum cancels to near zero; atol scaled to the
data), with rtol 1e-2 for bfloat16/float16 and 1e-5 for float32 (TORCH_COMPARE_RTOL_LOWP,
TORCH_COMPARE_RTOL_FP32 change them). The DDP losses are 200 SGD steps trained on such sums, so
last-bit differences grow step by step (a CPU simulation with 8 ranks and two summation orders
ended 7e-6 apart): they get rtol 1e-3 (TORCH_COMPARE_RTOL_LOSS), the figure the Megatron
comparison uses. Each result is still reported bitwise equal or not.
TORCH_COMPARE_MODE=bitwise forces bitwise everywhere, =tolerance the close test for sums even
with 2 ranks. The mode is printed first, and again on the last line.
"""
import os
import sys

import torch

d, a, b, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
mode = os.environ.get("TORCH_COMPARE_MODE") or ("bitwise" if n <= 2 else "tolerance")
if mode not in ("bitwise", "tolerance"):
    sys.exit(f"TORCH_COMPARE_MODE must be bitwise or tolerance, not {mode!r}")
RTOL_LOWP = float(os.environ.get("TORCH_COMPARE_RTOL_LOWP", "1e-2"))
RTOL_FP32 = float(os.environ.get("TORCH_COMPARE_RTOL_FP32", "1e-5"))
RTOL_LOSS = float(os.environ.get("TORCH_COMPARE_RTOL_LOSS", "1e-3"))

# Keys of torch_check.py whose result depends on the order of a floating-point sum. Everything
# else (data movement, max, min) must be bitwise equal in every mode.
ORDER_FREE = ("all_reduce_max", "all_reduce_min")
SUMS = ("all_reduce", "reduce", "reduce_scatter", "big_all_reduce", "big_reduce_scatter",
        "new_group_all_reduce", "ddp_losses")


def is_sum(key):
    if key.startswith(ORDER_FREE):
        return False
    return any(key == p or key.startswith(p + "_") for p in SUMS)


def rtol_for(key, t):
    if key == "ddp_losses":
        return RTOL_LOSS
    return RTOL_LOWP if t.dtype in (torch.bfloat16, torch.float16) else RTOL_FP32


if mode == "bitwise":
    print(f"torch_compare mode: bitwise for every result ({n} ranks)")
else:
    print(f"torch_compare mode: tolerance for sums ({n} ranks; rtol {RTOL_LOWP:g} bf16/fp16, {RTOL_FP32:g} fp32, "
          f"{RTOL_LOSS:g} DDP losses; atol = rtol * max|ref|), bitwise for data movement, max and min")
same = diff = close = 0
worst = (0.0, None)
for r in range(n):
    try:
        ra = torch.load(f"{d}/{a}_rank{r}.pt")
        rb = torch.load(f"{d}/{b}_rank{r}.pt")
    except (OSError, RuntimeError) as e:
        diff += 1
        print(f"rank {r}: cannot load the results: {e}")
        continue
    for k in sorted(ra):
        if k in rb and ra[k].dtype == rb[k].dtype and ra[k].shape == rb[k].shape and torch.equal(
                ra[k].view(torch.uint8), rb[k].view(torch.uint8)):
            same += 1
            continue
        x, y = ra[k].float(), rb.get(k, torch.zeros(1)).float()
        shape_ok = k in rb and ra[k].dtype == rb[k].dtype and x.shape == y.shape
        if mode == "tolerance" and shape_ok and is_sum(k) and ra[k].is_floating_point():
            rtol = rtol_for(k, ra[k])
            # NCCL's run is TAG_A: the reference.
            ref, got = x.double(), y.double()
            err = (got - ref).abs()
            scale = ref.abs().max().item() if ref.numel() else 0.0
            allow = rtol * (ref.abs() + scale)
            ok = bool(torch.isfinite(got).all()) and bool((err <= allow).all())
            emax = err.max().item() if err.numel() else 0.0
            rel = emax / scale if scale > 0 else emax
            # Share of the allowance used by the worst element (1 = at the limit).
            used = (err / allow.clamp_min(1e-300)).max().item() if err.numel() else 0.0
            if used > worst[0]:
                worst = (used, f"rank {r} {k}")
            what = f"max abs diff {emax:.3g}, {rel:.3g} of max|ref| {scale:.3g}, {used:.2f} of the allowance"
            if ok:
                close += 1
                print(f"rank {r} {k}: not bitwise, within rtol {rtol:g} ({what})")
                continue
            diff += 1
            print(f"rank {r} {k}: DIFFERS beyond rtol {rtol:g} ({what})")
            continue
        diff += 1
        print(f"rank {r} {k}: DIFFERS (max abs diff {(x - y).abs().max().item() if x.shape == y.shape else 'shape'})")
if mode == "tolerance":
    print(f"torch_compare tolerance: {same} bitwise equal, {close} not bitwise but within tolerance, "
          f"closest to the limit: {worst[0]:.2f} of the allowance ({worst[1] or '-'})")
print(f"torch_compare {a} vs {b}: {same + close} passed, {diff} failed [{mode}, {n} ranks]")
sys.exit(1 if diff else 0)
