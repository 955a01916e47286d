"""What a forward without torch.no_grad() costs in CUDA memory, on real models (missing-no-grad's claim:
"about as much memory as in training, often two to three times that of a guarded forward").

    python3 bench/lint/eval_memory.py [--json OUT.json]

Needs CUDA (the caching allocator's peak is the measurement) and torchvision. For each model, in one
process, alternating: an evaluation forward in eval() mode with autograd on, its output kept until the
next batch (as `output = model(x)` in a loop keeps it), and the same under torch.no_grad(); each
repeated (rounds) and the peak allocated bytes above the model's weights taken per forward. Prints
each peak and the ratio unguarded / guarded (the anchor is the guarded forward of the same run).
Models are built from their configurations (no weights are downloaded): ResNet-50 at 224x224,
ViT-B/16 at 224x224, GPT-2 small (transformers' GPT2LMHeadModel, 1,024 tokens) when transformers is
there.
"""
import argparse
import json
import sys

import torch


def peak_of(model, batch, guarded):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    if guarded:
        with torch.no_grad():
            out = model(batch)
    else:
        out = model(batch)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


def models():
    import torchvision

    yield "resnet50 batch 256 224x224", torchvision.models.resnet50(), lambda: torch.randn(256, 3, 224, 224, device="cuda")
    yield "vit_b_16 batch 128 224x224", torchvision.models.vit_b_16(), lambda: torch.randn(128, 3, 224, 224, device="cuda")
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return
    gpt2 = GPT2LMHeadModel(GPT2Config())
    yield "gpt2 (124M) batch 8 x 1024 tokens", (lambda m: (lambda ids: m(ids).logits))(gpt2), lambda: torch.randint(0, 50257, (8, 1024), device="cuda"), gpt2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("eval_memory: no CUDA device: this bench measures the CUDA caching allocator's peak", file=sys.stderr)
        return 2
    rows = []
    for entry in models():
        name, model, make = entry[0], entry[1], entry[2]
        module = entry[3] if len(entry) > 3 else model
        module.cuda().eval()
        batch = make()
        peak_of(model, batch, True)  # warm-up: cuDNN workspaces, kernels
        unguarded, guarded = [], []
        for _ in range(args.rounds):
            unguarded.append(peak_of(model, batch, False))
            guarded.append(peak_of(model, batch, True))
        u, g = min(unguarded), min(guarded)
        row = {"model": name, "unguardedPeakBytes": u, "guardedPeakBytes": g, "ratio": u / g, "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
        rows.append(row)
        print(f"{name}: without no_grad {u / 2**20:,.0f} MiB, under no_grad {g / 2**20:,.0f} MiB: {u / g:.2f}x", flush=True)
        module.cpu()
        del batch
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
