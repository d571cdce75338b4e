# The shared PyTorch peer (bench/torch_peer_gpt.py of the shared folder) moved to CUDA for one comparison on the lent GPU;
# bench/xla-run.py runs it as users run PyTorch there: --bf16 (autocast to bfloat16), SDPA (F.scaled_dot_product_attention,
# flash attention on the GPU), --compile (torch.compile), at the archive rows' shapes. --device cpu runs the same on a
# CPU build of torch (xla-run.py's CPU fallback, tiny shapes). Prints one JSON line.
#!/usr/bin/python3
"""Peer measurement: training throughput of a small GPT in PyTorch on CPU.

Used to hold the project's tokens/s against a well-known stack on the same
machine and the same model shape. Prints one JSON line per configuration.

usage: python torch_peer_gpt.py --vocab 4096 --d 128 --layers 4 --heads 4 \
         --seq 256 --batch 8 --steps 20 [--attn softmax|linear] [--threads N]

The peer to beat is current PyTorch (2.13, CPU build, its own MKL/oneDNN kernels):
  python3 -m venv .venv-peer && .venv-peer/bin/pip install torch numpy
  .venv-peer/bin/python torch_peer_gpt.py --threads 2      # PyTorch 2.x: its own pool uses both cores
(on these machines pip is configured with a local mirror that has a CPU wheel of torch 2.13; if
pip spends minutes retrying an unreachable default index, pass the configured mirror as
--index-url: `pip config get global.extra-index-url`). Measure --threads 1 and 2 and quote the
faster, back to back with the project's benchmark. `--compile` runs the model under torch.compile
(inductor, C++ kernels on CPU; its warm-up steps include the compilation): on these machines it
measured about 2x eager, so the peer to beat is the faster of eager and compiled.
The older peer, Debian's python3-torch 1.13 with OpenBLAS (apt-get install -y python3-torch
libopenblas0-pthread; /usr/bin/python3), wants --threads 1 so that only OpenBLAS's pool runs: two
pools of 2 threads each oversubscribe 2 cores and run ~8x slower.
"""

import argparse
import json
import math
import time
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, h, attn):
        super().__init__()
        self.h, self.attn = h, attn
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, L, self.h, D // self.h).transpose(1, 2) for t in (q, k, v))
        if self.attn == 'softmax':
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True) if hasattr(F, 'scaled_dot_product_attention') else self._sdpa(q, k, v)
        else:  # causal ELU+1 linear attention with a cumulative state (naive, memory O(L*d*d))
            q, k = F.elu(q) + 1, F.elu(k) + 1
            kv = torch.einsum('bhld,bhle->bhlde', k, v).cumsum(2)
            z = k.cumsum(2)
            y = torch.einsum('bhld,bhlde->bhle', q, kv) / (torch.einsum('bhld,bhld->bhl', q, z)[..., None] + 1e-6)
        x = x + self.proj(y.transpose(1, 2).reshape(B, L, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))

    @staticmethod
    def _sdpa(q, k, v):
        L = q.shape[2]
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        s = s.masked_fill(torch.triu(torch.ones(L, L, dtype=torch.bool), 1), float('-inf'))
        return s.softmax(-1) @ v


class GPT(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tok, self.pos = nn.Embedding(a.vocab, a.d), nn.Embedding(a.seq, a.d)
        self.blocks = nn.ModuleList(Block(a.d, a.heads, a.attn) for _ in range(a.layers))
        self.ln = nn.LayerNorm(a.d)
        self.head = nn.Linear(a.d, a.vocab, bias=False)
        self.head.weight = self.tok.weight
        for w in self.parameters():
            if w.dim() == 2:
                nn.init.normal_(w, std=0.02)

    def forward(self, idx, tgt):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def main():
    p = argparse.ArgumentParser()
    for k, v in dict(vocab=4096, d=128, layers=4, heads=4, seq=256, batch=8, steps=20, warmup=3, threads=1).items():
        p.add_argument('--' + k, type=int, default=v)
    p.add_argument('--attn', default='softmax')
    p.add_argument('--tf32', action='store_true')
    p.add_argument('--compile', action='store_true', help='torch.compile the model (inductor, C++ on CPU)')
    p.add_argument('--bf16', action='store_true', help='autocast the forward pass to bfloat16 (torch.autocast; fp32 master weights)')
    p.add_argument('--device', default='cuda', help='cuda (default) or cpu')
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_default_device(a.device)
    cuda = a.device.startswith('cuda')
    if a.tf32:
        torch.set_float32_matmul_precision('high')
    torch.set_num_threads(a.threads)
    m = GPT(a)
    fwd = torch.compile(m) if a.compile else m
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    data = torch.randint(0, a.vocab, (a.steps + a.warmup, a.batch, a.seq + 1))
    autocast = torch.autocast(device_type='cuda' if cuda else 'cpu', dtype=torch.bfloat16, enabled=a.bf16)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = None
    for i in range(a.steps + a.warmup):
        if i == a.warmup:  # with --compile the warm-up steps include compilation
            sync()
            t0 = time.perf_counter()
        with autocast:
            loss = fwd(data[i, :, :-1], data[i, :, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
    sync()
    dt = time.perf_counter() - t0
    params = sum(p.numel() for p in m.parameters())
    precision = '-bf16-autocast' if a.bf16 else '-tf32' if a.tf32 else '-fp32'
    print(
        json.dumps(
            dict(
                peer='pytorch-' + torch.__version__ + ('-compile' if a.compile else '') + precision + '-' + (torch.cuda.get_device_name() if cuda else 'cpu'),
                attn=a.attn,
                params=params,
                tokens_per_s=round(a.steps * a.batch * a.seq / dt, 1),
                step_ms=round(1000 * dt / a.steps, 1),
                final_loss=round(loss.item(), 4),
                peak_bytes=torch.cuda.max_memory_allocated() if cuda else None,
                bf16=a.bf16,
                compiled=a.compile,
                **{k: getattr(a, k) for k in ('vocab', 'd', 'layers', 'heads', 'seq', 'batch', 'threads')},
            )
        )
    )


if __name__ == '__main__':
    main()
