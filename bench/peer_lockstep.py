"""The PyTorch peer's training step, run on command so that bench/versus.ts can interleave it with ours.

bench:train runs the peer script (torch_peer_gpt.py, the shared folder's) as a whole process, one after
another: on this kind of host the speed drifts by ±20% within minutes and whichever process runs first
in a round was ~30% faster, so a ratio between two such runs measures the host. Here the peer's own
model (its GPT class, imported from the script named by --peer-script) stays loaded, idle on a pipe,
and runs N steps when told: `steps N` on stdin prints one JSON line {"ms": [per-step milliseconds],
"cpuMs": [per-step process CPU milliseconds, all threads]}.
The step is the script's loop body: forward (torch.compile'd with --compile), zero_grad, backward,
clip_grad_norm_(1.0), AdamW.step. Prints {"ready": ...} once the model is built; EOF ends it.
"""

import argparse
import importlib.util
import json
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument('--peer-script', required=True)
for k in ('vocab', 'd', 'layers', 'heads', 'seq', 'batch', 'threads'):
    p.add_argument('--' + k, type=int, required=True)
p.add_argument('--attn', default='softmax')
p.add_argument('--compile', action='store_true')
a = p.parse_args()

spec = importlib.util.spec_from_file_location('torch_peer_gpt', a.peer_script)
peer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(peer)

torch.manual_seed(0)
torch.set_num_threads(a.threads)
model = peer.GPT(a)
forward = torch.compile(model) if a.compile else model
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
name = 'pytorch-' + torch.__version__ + ('-compile' if a.compile else '')
print(json.dumps({'ready': name, 'params': sum(t.numel() for t in model.parameters())}), flush=True)

for line in sys.stdin:
    words = line.split()
    if len(words) != 2 or words[0] != 'steps':
        sys.exit(f"peer_lockstep: expected 'steps N', got {line.strip()!r}")
    times, cpu, loss = [], [], None
    for _ in range(int(words[1])):
        data = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
        t0, c0 = time.perf_counter(), time.process_time()
        loss = forward(data[:, :-1], data[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(1000 * (time.perf_counter() - t0))
        cpu.append(1000 * (time.process_time() - c0))
    print(json.dumps({'ms': times, 'cpuMs': cpu, 'loss': loss.item()}), flush=True)
