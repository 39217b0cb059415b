"""A kernel check to run with `kcoral run` (README: The kcoral command), from examples/.

Prints the helper module's total for --size (helper.py travels with this folder). Where
torch sees a GPU, it also checks torch.add on --size floats and times it with
kcoral.builtins.benchmark, which steps aside (one untimed call) under ncu and
compute-sanitizer. Arguments after the options are printed back; "three" among them makes
the script exit with 3.
"""

import argparse
import sys

from helper import total

parser = argparse.ArgumentParser()
parser.add_argument("--size", type=int, default=8)
parser.add_argument("rest", nargs="*")
args = parser.parse_args()
print(f"size {args.size}: total {total(args.size)}", args.rest)

try:
    import torch
except ImportError:
    torch = None
if torch is not None and torch.cuda.is_available():
    from kcoral.builtins import benchmark

    x = torch.arange(args.size, device="cuda", dtype=torch.float32)
    expected = torch.arange(1, args.size + 1, dtype=torch.float32)
    assert torch.equal(torch.add(x, 1.0).cpu(), expected), "torch.add is wrong"
    report = benchmark(torch.add, x, 1.0, {"warmup": 2, "repeat": 5})
    print("timed", report["timed"], report.get("under_tool"), report["latency_ms_median"])
print("checked", file=sys.stderr)
sys.exit(3 if "three" in args.rest else 0)
