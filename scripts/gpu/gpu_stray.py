"""A stray process holding GPU memory, for issue 36 stage 3 (scripts/gpu/h200_run.sh stage stray).

Waits until a file appears (the first candidate's last benchmark window), then takes --gib GiB on GPU 0 and
holds it for --hold-s seconds, printing what it took and when. Needs torch with CUDA; runs on the lent host.
"""

import argparse
import os
import sys
import time

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--after", required=True, help="take the memory once this file exists")
    parser.add_argument("--gib", type=float, default=16.0)
    parser.add_argument("--hold-s", type=float, default=300.0)
    parser.add_argument("--wait-s", type=float, default=900.0, help="give up if the file never appears")
    args = parser.parse_args()
    start = time.time()
    while not os.path.exists(args.after):
        if time.time() - start > args.wait_s:
            print(f"stray: {args.after} never appeared in {args.wait_s:.0f} s", flush=True)
            return 1
        time.sleep(0.5)
    # The file appears while the candidate's server still holds most of the GPU (2026-12-04, fourth lease:
    # 129.7 GiB, the stray's 16 GiB refused); take the memory the moment its stop frees it, before the next
    # launch's clean slate looks. The CUDA context first (about 0.5 GiB, under the tuner's bound).
    torch.cuda.init()
    torch.empty(1, device="cuda:0")
    held = None
    while held is None:
        if time.time() - start > args.wait_s:
            print(f"stray: no {args.gib:g} GiB free on cuda:0 within {args.wait_s:.0f} s", flush=True)
            return 1
        try:
            held = torch.empty(int(args.gib * 2**30), dtype=torch.uint8, device="cuda:0")
        except torch.OutOfMemoryError:
            time.sleep(0.05)
    held.fill_(1)
    torch.cuda.synchronize()
    since = time.strftime("%H:%M:%S")
    print(f"stray: pid {os.getpid()} holds {args.gib:g} GiB on cuda:0 from {since}", flush=True)
    time.sleep(args.hold_s)
    print(f"stray: released at {time.strftime('%H:%M:%S')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
