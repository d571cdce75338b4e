# Each fused CPU kernel alone (src/backend/native/kernels/), at the shapes of the reference GPT's step (batch 8 ×
# 256, d 128, 4 heads, MLP 512; SLAY's defaults P = 8 anchors, R = 2 nodes × M = 16 features): milliseconds per call,
# the best of --repeats timed loops, each the mean of --calls eager calls on TensorFlow's Python with 2 threads.
# What a kernel change does to the kernel itself, free of the rest of the step (docs/benchmarks.md); the step's own
# figures come from bench:paired and bench:versus. Build the op library as bench/profile_graph.py says, then:
#   .cache/xla/venv/bin/python bench/fused_kernels.py --ops /tmp/fused_ops.so
# Two builds (two commits) compare by running the script on each, alternately.
import argparse
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument('--ops', required=True, help='the op library built from src/backend/native/kernels/ with -DSLAYFORMER_STANDALONE_OPS')
parser.add_argument('--calls', type=int, default=100, help='calls per timed loop (default 100)')
parser.add_argument('--repeats', type=int, default=5, help='timed loops per kernel; the best is shown (default 5)')
args = parser.parse_args()

tf.config.threading.set_intra_op_parallelism_threads(2)
tf.config.threading.set_inter_op_parallelism_threads(2)
ops = tf.load_op_library(args.ops)
rng = np.random.default_rng(0)


def normal(*shape):
    return tf.constant(rng.standard_normal(shape).astype(np.float32))


def best_ms(call):
    for _ in range(10):
        call()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.calls):
            result = call()
        (result[0] if isinstance(result, (list, tuple)) else result).numpy()  # wait for the last call
        times.append((time.perf_counter() - start) / args.calls * 1000)
    return min(times)


batch, length, d, heads, hidden = 8, 256, 128, 4, 512
head_dim, n = d // heads, batch * heads
rows, mlp = normal(batch * length, d), normal(batch * length, hidden)
gain, shift = normal(d), normal(d)
_, xhat, rstd = ops.slayformer_layer_norm(rows, gain, shift, eps=1e-5)
q, k, v = normal(n, length, head_dim), normal(n, length, head_dim), normal(n, length, head_dim)
out, probs = ops.slayformer_causal_attention(q, k, v)
x = normal(batch, heads, length, head_dim)
anchors, omegas = normal(head_dim, 8), normal(2, heads, head_dim, 16)
nodes = tf.constant([[0.5, 0.7], [1.2, 0.3]], tf.float32)
a, b = ops.slayformer_slay_factors(x, anchors, omegas, nodes)
aq, ak, bq, bk = normal(n, length, 8), normal(n, length, 8), normal(n, length, 32), normal(n, length, 32)
sums, xa, xb = ops.slayformer_causal_factor_attention(aq, ak, bq, bk, v)

kernels = {
    'LayerNorm': lambda: ops.slayformer_layer_norm(rows, gain, shift, eps=1e-5),
    'LayerNormGrad': lambda: ops.slayformer_layer_norm_grad(rows, xhat, rstd, gain),
    'GeluTanh': lambda: ops.slayformer_gelu_tanh(mlp),
    'GeluTanhGrad': lambda: ops.slayformer_gelu_tanh_grad(mlp, mlp),
    'CausalAttention': lambda: ops.slayformer_causal_attention(q, k, v),
    'CausalAttentionGrad': lambda: ops.slayformer_causal_attention_grad(v, q, k, v, probs, out),
    'SlayFactors': lambda: ops.slayformer_slay_factors(x, anchors, omegas, nodes),
    'SlayFactorsGrad': lambda: ops.slayformer_slay_factors_grad(a, b, x, anchors, omegas, nodes),
    'CausalFactorAttention': lambda: ops.slayformer_causal_factor_attention(aq, ak, bq, bk, v),
    'CausalFactorAttentionGrad': lambda: ops.slayformer_causal_factor_attention_grad(sums, aq, ak, bq, bk, v, xa, xb),
}
print('| kernel | ms per call |')
print('| --- | ---: |')
for name, call in kernels.items():
    print(f'| Slayformer{name} | {best_ms(call):.3f} |')
