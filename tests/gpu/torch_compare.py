"""Compares two torch_check.py runs bit for bit: python3 torch_compare.py DIR TAG_A TAG_B NRANKS"""
import sys

import torch

d, a, b, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
same = diff = 0
for r in range(n):
    ra = torch.load(f"{d}/{a}_rank{r}.pt")
    rb = torch.load(f"{d}/{b}_rank{r}.pt")
    for k in sorted(ra):
        if k in rb and ra[k].dtype == rb[k].dtype and torch.equal(ra[k].view(torch.uint8), rb[k].view(torch.uint8)):
            same += 1
        else:
            diff += 1
            x, y = ra[k].float(), rb.get(k, torch.zeros(1)).float()
            print(f"rank {r} {k}: DIFFERS (max abs diff {(x - y).abs().max().item() if x.shape == y.shape else 'shape'})")
print(f"torch_compare {a} vs {b}: {same} passed, {diff} failed")
sys.exit(1 if diff else 0)
