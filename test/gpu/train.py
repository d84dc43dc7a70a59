#!/usr/bin/env python3
"""The real-GPU check's trainer: a small PyTorch model trained on the GPUs
workerd gave the job, reading its config from $CONFIG_PATH as SimpleTuner's
trainer does.

config keys:
  mode     "train" (default): train `steps` steps and exit;
           "hold": hold `hold_mib` of GPU memory and keep computing until
           stopped (SIGTERM saves a checkpoint and exits)
  steps    training steps (default 300)
  hold_mib GPU memory to hold in "hold" mode (default 1024)

It prints what it sees first ("gpu-check: visible=… devices=…"), then
"loss" lines, and "holding" once its memory is allocated.
"""
import json
import os
import signal
import sys
import time

import torch


def main():
    cfg = json.load(open(os.environ["CONFIG_PATH"]))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    if not torch.cuda.is_available():
        print(f"gpu-check: visible={visible} devices=0: torch sees no GPU", flush=True)
        return 3
    n = torch.cuda.device_count()
    names = ",".join(torch.cuda.get_device_name(i) for i in range(n))
    print(f"gpu-check: visible={visible} devices={n} names={names}", flush=True)
    dev = torch.device("cuda:0")
    stop = {"now": False}

    def on_term(*_):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    if cfg.get("mode") == "hold":
        mib = int(cfg.get("hold_mib", 1024))
        block = torch.empty(mib * (1 << 20), dtype=torch.uint8, device=dev)
        block.fill_(1)
        a = torch.randn(2048, 2048, device=dev)
        torch.cuda.synchronize()
        print(f"holding {mib} MiB on {dev}", flush=True)
        while not stop["now"]:
            a = torch.tanh(a @ a)
            torch.cuda.synchronize()
            time.sleep(0.05)
        torch.save({"a": a.cpu()}, "checkpoint.pt")
        print("sigterm: checkpoint saved", flush=True)
        return 0
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1)).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(4096, 256, device=dev)
    y = x[:, :8].sum(dim=1, keepdim=True)
    steps = int(cfg.get("steps", 300))
    first = last = None
    for step in range(1, steps + 1):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        last = loss.item()
        first = first if first is not None else last
        if step % 50 == 0 or step == steps:
            print(f"step {step}/{steps} loss={last:.4f}", flush=True)
        if stop["now"]:
            return 0
    print(f"trained: loss {first:.4f} -> {last:.4f}", flush=True)
    return 0 if last < first else 4


if __name__ == "__main__":
    sys.exit(main())
