"""PyTorch implementation of the models slayformer exports when transformers' own GPT-2 / BERT classes
would compute another function: any of slayformer's attention mechanisms, no biases, a pre-LN BERT,
the Transformer++ options (rotary positions, a SwiGLU MLP, RMSNorm), … Shipped by `npm run export -- <checkpoint> --format hf --out DIR` beside config.json and
model.safetensors; load with

    AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)   # GPT (slayformer-gpt2)
    AutoModelForMaskedLM.from_pretrained(DIR, trust_remote_code=True)   # BERT (slayformer-bert)

The mechanisms' random projections, anchors and trained parameters are read from model.safetensors
(`slayformer.blocks.<i>.attn.*`), never drawn again. Each function names the TypeScript module of
slayformer whose maths it repeats (src/model/…); the formulas are the same, the evaluation order is
not: kernel (linear) attention runs in its quadratic form, the full score matrix
phi(q_i).phi(k_j) masked and normalised, which is the same function as the project's chunked
running sums (outputs agree to float32 rounding).

generate() decodes from a cache (SlayformerCache), as the project's `npm run generate` does: softmax and
exact Yat keep every layer's keys and values; the kernel (linear) mechanisms keep only their running sums
S = sum_j phi(k_j) v_j^T and z = sum_j phi(k_j) (plus the running key scale of Performer/DARKFormer), so a
new token costs the same at any length. The prefix is never run again; `generate(..., use_cache=False)`
runs the whole sequence per token instead, and gives the same tokens.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast, MaskedLMOutput

from .configuration_slayformer import SlayformerBertConfig, SlayformerGPT2Config, check_sizes

# transformers' activation names → the GELU the project computes (src/hf/config.ts ACTIVATION_OF).
TANH_GELUS = ('gelu_new', 'gelu_pytorch_tanh', 'gelu_fast')
ERF_GELUS = ('gelu', 'gelu_python')


# ---------------------------------------------------------------------------------------------------
# Tensor helpers (src/model/ops.ts)


def l2_normalize(x):
    """x / max(|x|, 1e-12) over the last axis (ops.ts l2Normalize)."""
    return x * torch.rsqrt(torch.clamp(x.square().sum(-1, keepdim=True), min=1e-24))


def project_per_head(x, w):
    """x [B, H, L, d] by one matrix per head w [H, d, m], or by a shared w [d, m] → [B, H, L, m]."""
    return torch.einsum('bhld,hdm->bhlm', x, w) if w.dim() == 3 else x @ w


def lower_triangle(length, device):
    """[L, L] True where key j is visible from query i (j <= i)."""
    return torch.ones(length, length, dtype=torch.bool, device=device).tril()


# ---------------------------------------------------------------------------------------------------
# The kernel-attention contraction (src/model/attention/chunked.ts, linear-attention.ts)
#
#   Y_i = sum_j phi(q_i).phi(k_j) v_j / (sum_j phi(q_i).phi(k_j) + delta)     j <= i if causal
#
# Row-stabilised positive random features (Performer, DARKFormer) come with a shift c per row, the
# true features being features * e^c. Query i reads its keys on the scale a_i = max of the key shifts
# it sees, each score rescaled by e^(c_j - a_i) <= 1, and delta enters as delta * e^(-c_q - a_i): the
# ratio is exactly the un-stabilised one. Padded keys (a key mask) contribute nothing and do not take
# part in the maximum.

EMPTY_SHIFT = -1e30
LOG_DELTA_MAX = 69.0
SMALLEST_NORMAL = 2.0**-126


def rescaled_delta(delta, query_shift, key_scale):
    """delta * e^(-c_q - a), bounded as chunked.ts rescaledDelta."""
    log_delta = math.log(delta) if delta > 0 else -math.inf
    exponent = torch.clamp(log_delta - query_shift - key_scale, max=LOG_DELTA_MAX)
    return torch.clamp(torch.exp(exponent), min=SMALLEST_NORMAL)


def kernel_attention(phi_q, phi_k, v, causal, key_mask=None, delta=0.0, clamp_min=None, q_shift=None, k_shift=None):
    """phi_q, phi_k [B, H, L, F], v [B, H, L, D], key_mask [B, L] 1/0 → [B, H, L, D].

    `clamp_min` (signed features, SchoenbAt) clamps the denominator from below instead of adding delta.
    """
    b, _, length, _ = phi_k.shape
    if key_mask is not None:
        keep = key_mask.to(phi_k.dtype).view(b, 1, length, 1)
        phi_k = phi_k * keep
        if k_shift is not None:
            k_shift = k_shift + (1 - keep) * EMPTY_SHIFT
    scores = phi_q @ phi_k.transpose(-1, -2)  # [B, H, L, L]
    visible = lower_triangle(length, phi_q.device) if causal else None
    scaled_delta = None
    if k_shift is not None:
        with torch.no_grad():  # the output does not depend on the shifts (chunked.ts: computed off the tape)
            keys = k_shift.transpose(-1, -2)  # [B, H, 1, L]
            if causal:
                scale = torch.where(visible, keys, torch.full_like(keys, EMPTY_SHIFT)).amax(-1, keepdim=True)
            else:
                scale = keys.amax(-1, keepdim=True)
            scale = torch.clamp(scale, min=EMPTY_SHIFT)  # a query that sees no key: the empty shift
            decay = torch.exp(torch.clamp(keys - scale, max=0))  # e^(c_j - a_i)
            scaled_delta = rescaled_delta(delta, q_shift, scale)
        scores = scores * decay
    if visible is not None:
        scores = scores.masked_fill(~visible, 0.0)
    numerator = scores @ v
    denominator = scores.sum(-1, keepdim=True)
    if clamp_min is not None:
        denominator = torch.clamp(denominator, min=clamp_min)
    else:
        denominator = denominator + (scaled_delta if scaled_delta is not None else delta)
    return numerator / denominator


def empty_kernel_state(phi_k, v):
    """The running sums before any key: S [B, H, F, D], z [B, H, F, 1], and the key scale a [B, H, 1, 1]."""
    b, h, _, f = phi_k.shape
    return {
        'sums': phi_k.new_zeros(b, h, f, v.shape[-1]),
        'normalizer': phi_k.new_zeros(b, h, f, 1),
        'scale': phi_k.new_full((b, h, 1, 1), EMPTY_SHIFT),
    }


def kernel_attention_step(phi_q, phi_k, v, state, delta=0.0, clamp_min=None, q_shift=None, k_shift=None):
    """The causal contraction for a block of n new positions after those the state summarises: the block's own
    scores in quadratic form plus each query's product with the running sums, then the sums advanced over the
    block. Returns (output [B, H, n, D], state). The same function as kernel_attention over the whole sequence:
    query i reads every key on the scale a_i = the largest key shift up to i (the state's scale included)."""
    state = state if state is not None else empty_kernel_state(phi_k, v)
    n = phi_k.shape[2]
    visible = lower_triangle(n, phi_q.device)
    scores = (phi_q @ phi_k.transpose(-1, -2)).masked_fill(~visible, 0.0)  # [B, H, n, n]
    from_state = phi_q @ state['sums'], phi_q @ state['normalizer']  # [B, H, n, D], [B, H, n, 1]
    if k_shift is None:
        numerator = scores @ v + from_state[0]
        denominator = scores.sum(-1, keepdim=True) + from_state[1]
        sums = state['sums'] + phi_k.transpose(-1, -2) @ v
        normalizer = state['normalizer'] + phi_k.sum(2).unsqueeze(-1)
        scale = state['scale']
        scaled_delta = delta
    else:
        with torch.no_grad():
            keys = k_shift.transpose(-1, -2)  # [B, H, 1, n]
            seen = torch.where(visible, keys, torch.full_like(keys, EMPTY_SHIFT)).amax(-1, keepdim=True)
            query_scale = torch.maximum(seen, state['scale'])  # [B, H, n, 1]
            decay = torch.exp(torch.clamp(keys - query_scale, max=0))
            state_decay = torch.exp(torch.clamp(state['scale'] - query_scale, max=0))
            scale = torch.maximum(state['scale'], keys.amax(-1, keepdim=True))  # [B, H, 1, 1]
            key_decay = torch.exp(torch.clamp(k_shift - scale, max=0))  # [B, H, n, 1]: e^(c_j - a)
            old_decay = torch.exp(torch.clamp(state['scale'] - scale, max=0))
            scaled_delta = rescaled_delta(delta, q_shift, query_scale)
        scores = scores * decay
        numerator = scores @ v + state_decay * from_state[0]
        denominator = scores.sum(-1, keepdim=True) + state_decay * from_state[1]
        weighted = phi_k * key_decay
        sums = old_decay * state['sums'] + weighted.transpose(-1, -2) @ v
        normalizer = old_decay * state['normalizer'] + weighted.sum(2).unsqueeze(-1)
    if clamp_min is not None:
        denominator = torch.clamp(denominator, min=clamp_min)
    else:
        denominator = denominator + scaled_delta
    return numerator / denominator, {'sums': sums, 'normalizer': normalizer, 'scale': scale}


# ---------------------------------------------------------------------------------------------------
# Attention mechanisms (src/model/attention/<name>.ts), one module per layer. forward(q, k, v, key_mask,
# total_length): q, k, v [B, H, L, Dh] as split from the fused projection (no 1/sqrt(Dh) applied),
# key_mask [B, L] 1/0 or None, total_length the sequence length cosFormer re-weights by.
# step(q, k, v, state, position, total_length): the causal form for positions position … position + n - 1
# after the ones `state` holds (None before the first), returning (output, state); generate() decodes with it.


def visible_after(position, n, device):
    """[n, position + n] True where key j is visible from new query i (j <= position + i)."""
    keys = torch.arange(position + n, device=device)
    return keys.unsqueeze(0) <= (torch.arange(n, device=device) + position).unsqueeze(1)


def append_keys(state, k, v):
    """The key/value cache of the quadratic mechanisms: every key and value so far, [B, H, position + n, Dh]."""
    if state is None:
        return {'keys': k, 'values': v}
    return {'keys': torch.cat([state['keys'], k], 2), 'values': torch.cat([state['values'], v], 2)}


class Mechanism(nn.Module):
    """A mechanism's fixed tensors are buffers named as in the export; they start as NaN, so a model that
    was not loaded from an export fails instead of computing with made-up projections."""

    def __init__(self, config, options):
        super().__init__()
        sizes = _sizes(config)
        self.causal = config.model_type == SlayformerGPT2Config.model_type
        self.num_heads = sizes['heads']
        self.head_dim = sizes['width'] // sizes['heads']
        self.options = options

    def add_buffer(self, name, shape, owner=None):
        (owner or self).register_buffer(name, torch.full(shape, math.nan))

    def add_parameter(self, name, value):
        self.register_parameter(name, nn.Parameter(value))

    def check_loaded(self):
        for name, value in self.named_buffers():
            if torch.isnan(value).any():
                raise ValueError(f"slayformer: {name} of {type(self).__name__} was not loaded; load the model from an export's model.safetensors")


class Softmax(Mechanism):
    """softmax.ts: softmax(q k^T / sqrt(d)) v with a constant additive mask; a row that sees no real key outputs 0."""

    NEG = -1e9

    def forward(self, q, k, v, key_mask, total_length):
        b, _, length, d = q.shape
        scores = (q * (1 / math.sqrt(d))) @ k.transpose(-1, -2)
        mask = None
        if self.causal:
            mask = (1 - lower_triangle(length, q.device).to(q.dtype)) * self.NEG
        if key_mask is None:
            return torch.softmax(scores if mask is None else scores + mask, -1) @ v
        real = key_mask.to(q.dtype)
        padding = (1 - real.view(b, 1, 1, length)) * self.NEG
        seen = torch.cumsum(real, 1) if self.causal else real.sum(1, keepdim=True)
        sees_a_key = (seen > 0).to(q.dtype).view(b, 1, length if self.causal else 1, 1)
        weights = torch.softmax(scores + (padding if mask is None else mask + padding), -1)
        return (weights @ v) * sees_a_key

    def step(self, q, k, v, state, position, total_length):
        state = append_keys(state, k, v)
        scores = (q * (1 / math.sqrt(q.shape[-1]))) @ state['keys'].transpose(-1, -2)
        mask = (~visible_after(position, q.shape[2], q.device)).to(q.dtype) * self.NEG
        return torch.softmax(scores + mask, -1) @ state['values'], state


class YatSpherical(Mechanism):
    """yat-spherical.ts: K = x^2 / (C - 2x), x = unit(q).unit(k) clamped to [-1, 1], C = 2 + epsilon; Y = K v / (K 1 + delta)."""

    def kernel(self, q, k):
        epsilon = self.options['epsilon']
        x = torch.clamp(l2_normalize(q) @ l2_normalize(k).transpose(-1, -2), -1, 1)
        return x.square() / (2 + epsilon - 2 * x)

    def forward(self, q, k, v, key_mask, total_length):
        b, _, length, _ = q.shape
        kernel = self.kernel(q, k)
        if self.causal:
            kernel = kernel * lower_triangle(length, q.device).to(q.dtype)
        if key_mask is not None:
            kernel = kernel * key_mask.to(q.dtype).view(b, 1, 1, length)
        return (kernel @ v) / (kernel.sum(-1, keepdim=True) + self.options['delta'])

    def step(self, q, k, v, state, position, total_length):
        state = append_keys(state, k, v)
        kernel = self.kernel(q, state['keys']) * visible_after(position, q.shape[2], q.device).to(q.dtype)
        return (kernel @ state['values']) / (kernel.sum(-1, keepdim=True) + self.options['delta']), state


class KernelMechanism(Mechanism):
    """A kernel (linear) mechanism: feature maps phi(q), phi(k) contracted by kernel_attention (the whole
    sequence) or kernel_attention_step (from the running sums). Subclasses give `feature_maps`, and SchoenbAt
    its denominator clamp and output affine map."""

    def feature_maps(self, q, k, total_length, position):
        """(phi_q, phi_k, q_shift, k_shift) of positions position … position + L - 1; the shifts None when unstabilised."""
        raise NotImplementedError

    def output(self, attended):
        return attended

    def contraction_options(self):
        return {'delta': self.options['delta']}

    def forward(self, q, k, v, key_mask, total_length):
        phi_q, phi_k, q_shift, k_shift = self.feature_maps(q, k, total_length, 0)
        attended = kernel_attention(phi_q, phi_k, v, self.causal, key_mask, q_shift=q_shift, k_shift=k_shift, **self.contraction_options())
        return self.output(attended)

    def step(self, q, k, v, state, position, total_length):
        phi_q, phi_k, q_shift, k_shift = self.feature_maps(q, k, total_length, position)
        attended, state = kernel_attention_step(phi_q, phi_k, v, state, q_shift=q_shift, k_shift=k_shift, **self.contraction_options())
        return self.output(attended), state


class LinearElu(KernelMechanism):
    """linear-elu.ts: phi(x) = elu(x) + 1."""

    def feature_maps(self, q, k, total_length, position):
        return F.elu(q) + 1, F.elu(k) + 1, None, None


class Cosformer(KernelMechanism):
    """cosformer.ts: features [relu(x_i) sin a_i, relu(x_i) cos a_i], a_i = (pi/2) i / M, 1-based positions.

    M is option reweightLength, or when it is 0 the sequence length (the official cosFormer); generate()
    passes the model's maximum length as the sequence length, as the project's decoder does."""

    def feature_maps(self, q, k, total_length, position):
        fixed = self.options['reweightLength']
        if fixed > 0 and total_length > fixed:
            raise ValueError(f"attention 'cosformer': sequence length {total_length} exceeds option 'reweightLength' = {fixed}; use a length <= {fixed}")
        m = fixed if fixed > 0 else total_length
        length = q.shape[2]
        angles = [(math.pi / 2) * (i + 1) / m for i in range(position, position + length)]  # float64, as the project's host code
        sin = torch.tensor([math.sin(a) for a in angles], dtype=q.dtype, device=q.device).view(1, 1, length, 1)
        cos = torch.tensor([math.cos(a) for a in angles], dtype=q.dtype, device=q.device).view(1, 1, length, 1)

        def features(x):
            positive = torch.relu(x)
            return torch.cat([positive * sin, positive * cos], -1)

        return features(q), features(k), None, None


def positive_random_features(x, omega, stabilize=False, clamp=None, log_weights=None):
    """features/prf.ts: m^(-1/2) exp(omega_j . x - |x|^2 / 2 + log_weights_j / 2), omega [H, d, m] or [d, m],
    log_weights [H, m] (importance weights, dataInit 'variance-optimal') or None; with `stabilize` each row
    subtracts its largest exponent, returned as the shift [B, H, L, 1]."""
    m = omega.shape[-1]
    logits = project_per_head(x, omega) - 0.5 * x.square().sum(-1, keepdim=True)
    if log_weights is not None:
        logits = logits + 0.5 * log_weights.view(1, -1, 1, m)
    shift = None
    if stabilize:
        with torch.no_grad():
            shift = logits.amax(-1, keepdim=True)
        logits = logits - shift
    if clamp is not None:
        logits = torch.clamp(logits, -clamp, clamp)
    return torch.exp(logits) * (1 / math.sqrt(m)), shift


class Performer(KernelMechanism):
    """performer.ts: FAVOR+ on x~ = d^(-1/4) x with the saved projection [H, Dh, m]."""

    def __init__(self, config, options, input_dim=None):
        super().__init__(config, options)
        self.add_buffer('projection', (self.num_heads, input_dim or self.head_dim, options['features']))
        if options.get('dataInit') == 'variance-optimal':
            self.add_buffer('featureLogWeights', (self.num_heads, options['features']))

    def inputs(self, x):
        return x * (self.head_dim**-0.25)

    def feature_maps(self, q, k, total_length, position):
        self.check_loaded()
        phi_q, q_shift = positive_random_features(self.inputs(q), self.projection, stabilize=True, log_weights=getattr(self, 'featureLogWeights', None))
        phi_k, k_shift = positive_random_features(self.inputs(k), self.projection, stabilize=True, log_weights=getattr(self, 'featureLogWeights', None))
        return phi_q, phi_k, q_shift, k_shift


class Darkformer(Performer):
    """darkformer.ts: Performer's features of x~ = M (d^(-1/4) x), M [H, r, Dh] trained (covarianceFactor)."""

    def __init__(self, config, options):
        sizes = _sizes(config)
        rank = options['rank'] or sizes['width'] // sizes['heads']  # 0 = headDim
        super().__init__(config, options, input_dim=rank)
        self.add_parameter('covarianceFactor', torch.eye(self.head_dim)[:rank].repeat(self.num_heads, 1, 1))

    def inputs(self, x):
        return project_per_head(x, self.covarianceFactor.transpose(1, 2)) * (x.shape[3] ** -0.25)


def slay_quadrature(points, epsilon):
    """features/quadrature.ts: Gauss-Laguerre nodes t_r and weights alpha_r (Golub-Welsch, nodes polished by
    two Newton steps, weights 1 / sum_i L_i(t)^2); SLAY's scales s_r = t_r / C and weights w_r = alpha_r / C."""

    def laguerre_values(n, t):
        out = [1.0]
        if n >= 1:
            out.append(1 - t)
        for j in range(1, n):
            out.append(((2 * j + 1 - t) * out[j] - j * out[j - 1]) / (j + 1))
        return out

    jacobi = np.zeros((points, points))
    for i in range(points):
        jacobi[i, i] = 2 * i + 1
        if i > 0:
            jacobi[i, i - 1] = jacobi[i - 1, i] = i
    nodes = []
    for t in np.linalg.eigvalsh(jacobi):
        t = float(t)
        for _ in range(2):
            values = laguerre_values(points, t)
            derivative = points * (values[points] - values[points - 1]) / t
            if derivative != 0 and math.isfinite(derivative):
                t -= values[points] / derivative
        nodes.append(t)
    weights = [1 / sum(value * value for value in laguerre_values(points - 1, t)) for t in nodes]
    c = 2 + epsilon
    return [t / c for t in nodes], [w / c for w in weights]


class Tensors(nn.Module):
    """A named group of an export's buffers (e.g. SLAY's `anchor.anchors`)."""


class Slay(KernelMechanism):
    """slay.ts: Psi(u) = concat_r sqrt(w_r) (phi_poly(u) (x) phi_PRF(u; s_r)) of the unit rows u, or the
    laplace-only / hadamard variants; polynomial maps of features/polynomial.ts (matrices shared by heads)."""

    def __init__(self, config, options):
        super().__init__(config, options)
        self.poly = options['poly']
        d, p, m = self.head_dim, options['anchors'], options['prfFeatures']
        self.prf_features = m
        epsilon = options['epsilon']
        self.scales, weights = slay_quadrature(options['quadratureNodes'], epsilon)
        c = 2 + epsilon
        # Laplace-only discretises (C^2/4) / (C - 2x): weights (C^2/4) w_r.
        self.weights = [c * c / 4 * w for w in weights] if self.poly == 'laplace-only' else weights
        prf = Tensors()
        for node in range(len(self.scales)):
            self.add_buffer(f'node{node}', (self.num_heads, d, m), prf)
        self.add_module('prf', prf)
        shapes = {
            'anchor': {'anchors': (d, p)},
            'random-maclaurin': {'maclaurin': (d, 2 * p)},
            'tensorsketch': {'countSketch': (d, 2 * p)},
            'nystrom': {'anchors': (d, p), 'whitening': (p, p)},
        }.get(self.poly, {})
        if shapes:
            group = Tensors()
            for name, shape in shapes.items():
                self.add_buffer(name, shape, group)
            self.add_module(self.poly, group)

    def polynomial(self, u):
        """phi_poly of unit rows u [N, d]."""
        p = self.options['anchors']
        group = getattr(self, self.poly, None)
        if self.poly == 'anchor':
            return (u @ group.anchors).square() * (1 / math.sqrt(p))
        if self.poly == 'exact':
            return (u.unsqueeze(-1) * u.unsqueeze(-2)).reshape(u.shape[0], -1)
        if self.poly == 'random-maclaurin':
            both = u @ group.maclaurin
            return both[:, :p] * both[:, p:] * (1 / math.sqrt(p))
        if self.poly == 'tensorsketch':
            both = u @ group.countSketch
            outer = both[:, :p].unsqueeze(-1) * both[:, p:].unsqueeze(-2)
            # Folded into the circular convolution by F[(m, n), k] = [m + n = k mod P].
            sums = (torch.arange(p, device=u.device).unsqueeze(1) + torch.arange(p, device=u.device)) % p
            return outer.reshape(u.shape[0], p * p) @ F.one_hot(sums.reshape(-1), p).to(u.dtype)
        return (u @ group.anchors).square() @ group.whitening  # nystrom

    def features(self, x):
        unit = l2_normalize(x)
        b, h, length, d = unit.shape
        m = self.prf_features
        poly = None
        if self.poly not in ('laplace-only', 'hadamard'):
            poly = self.polynomial(unit.reshape(b * h * length, d)).view(b, h, length, -1)
        nodes = []
        for node, scale in enumerate(self.scales):
            omega = getattr(self.prf, f'node{node}')
            prf, _ = positive_random_features(unit * math.sqrt(2 * scale), omega, clamp=20)
            prf = prf * math.sqrt(self.weights[node])
            if self.poly == 'laplace-only':
                nodes.append(prf)
            elif self.poly == 'hadamard':
                # The polynomial factor reuses this node's projections omega^T u (the reference's shared omega).
                nodes.append(project_per_head(unit, omega).square() * (1 / math.sqrt(m)) * prf)
            else:  # the row-wise outer product, the polynomial feature's index major
                nodes.append((poly.unsqueeze(-1) * prf.unsqueeze(-2)).reshape(b, h, length, -1))
        return torch.cat(nodes, -1)

    def feature_maps(self, q, k, total_length, position):
        self.check_loaded()
        return self.features(q), self.features(k), None, None


def maclaurin_coefficients(kernel, max_degree):
    """features/random-maclaurin.ts: a_0 … a_maxDegree of SchoenbAt's dot-product kernels."""
    out, factorial, binom_half = [], 1.0, 1.0
    for n in range(max_degree + 1):
        if n > 0:
            factorial *= n
            binom_half *= (0.5 - (n - 1)) / n
        if kernel in ('exp', 'trigh'):
            out.append(1 / factorial)
        elif kernel == 'inverse':
            out.append(1.0)
        elif kernel == 'logi':
            out.append(1.0 if n == 0 else 1 / n)
        elif kernel == 'sqrt':
            out.append((2 if n == 0 else 0) - binom_half * (-1) ** n)
        else:
            raise ValueError(f'schoenbat: unknown kernel {kernel!r}')
    return out


class Schoenbat(KernelMechanism):
    """schoenbat.ts: pre-SBN, random Maclaurin features (features/random-maclaurin.ts) with the saved
    projections and the draw's degrees (config.json slayformer.layers[i].maclaurinDegrees, highest
    first), the denominator clamped from below, post-SBN gamma * out + beta."""

    def __init__(self, config, options, degrees):
        super().__init__(config, options)
        d = self.head_dim
        self.level_sizes = [sum(1 for n in degrees if n >= level) for level in range(1, degrees[0] + 1)]
        coefficients = maclaurin_coefficients(options['kernel'], options['maxDegree'])
        self.constant_feature = math.sqrt(coefficients[0])
        if options['denominatorClamp'] == 'reference':
            self.clamp_min = 1.0
        else:  # f(-1/sqrt(d)): the least exact denominator with one visible key
            t, self.clamp_min = -1 / math.sqrt(d), 0.0
            for a in reversed(coefficients):
                self.clamp_min = self.clamp_min * t + a
        self.add_buffer('maclaurinProjections', (sum(self.level_sizes), d))
        self.add_parameter('postSbnGamma', torch.ones(1))
        self.add_parameter('postSbnBeta', torch.zeros(d))

    def maclaurin_features(self, x):
        """x [..., d] → [..., D]: the constant feature, then the random features, highest degree first."""
        lead = x.shape[:-1]
        projected = x.reshape(-1, x.shape[-1]) @ self.maclaurinProjections.T  # every r^T x: [N, sum of degrees]
        levels = torch.split(projected, self.level_sizes, dim=1)
        by_degree = []
        running = levels[0]
        for index, size in enumerate(self.level_sizes):
            if index > 0:
                running = running * levels[index]
            higher = self.level_sizes[index + 1] if index + 1 < len(self.level_sizes) else 0
            if size == higher:
                continue
            # Columns [higher, size) have degree index + 1; the first `higher` go on.
            by_degree.insert(0, running[:, higher:size])
            running = running[:, :higher]
        constant = torch.full((projected.shape[0], 1), self.constant_feature, dtype=x.dtype, device=x.device)
        return torch.cat([constant, *by_degree], 1).reshape(*lead, -1)

    def side(self, x):
        mean = x.mean(-1, keepdim=True)
        variance = (x - mean).square().mean(-1, keepdim=True)
        normalized = l2_normalize((x - mean) / torch.sqrt(variance + 1e-12))
        return self.maclaurin_features(normalized * (self.head_dim**-0.25))

    def feature_maps(self, q, k, total_length, position):
        self.check_loaded()
        return self.side(q), self.side(k), None, None

    def contraction_options(self):
        return {'clamp_min': self.clamp_min}

    def output(self, attended):
        return attended * self.postSbnGamma + self.postSbnBeta


class Gla(Mechanism):
    """gla.ts: gated linear attention, causal only. S_t = diag(a_t) S_{t-1} + k_t v_t^T, o_t = RMSNorm(S_t^T q_t / sqrt(d)) * w,
    log a_t = logsigmoid([k_t of every head] W_down W_up + b) / tau. forward runs the quadratic form
    sum_c q_ic k_jc e^(G_ic - G_jc) (G the cumulative log-gates, j <= i); step the recurrence on the state S."""

    NORM_EPS = 1e-5

    def __init__(self, config, options):
        super().__init__(config, options)
        if not self.causal:
            raise ValueError("config.json: attention 'gla' is causal only (a slayformer-gpt2 export)")
        width, rank = self.num_heads * self.head_dim, options['gateRank']
        self.add_parameter('gateDown', torch.zeros(width, rank))
        self.add_parameter('gateUp', torch.zeros(rank, width))
        self.add_parameter('gateBias', torch.zeros(width))
        self.add_parameter('normWeight', torch.ones(self.head_dim))

    def gates(self, k):
        """The log-gates [B, H, L, d] from the keys of every head."""
        b, h, length, d = k.shape
        logits = k.transpose(1, 2).reshape(b, length, h * d) @ self.gateDown @ self.gateUp + self.gateBias
        return (F.logsigmoid(logits) / self.options['gateNormalizer']).view(b, length, h, d).transpose(1, 2)

    def normed(self, o):
        return o * torch.rsqrt(o.square().mean(-1, keepdim=True) + self.NORM_EPS) * self.normWeight

    def forward(self, q, k, v, key_mask, total_length):
        b, _, length, d = q.shape
        g = self.gates(k)
        if key_mask is not None:
            keep = key_mask.to(q.dtype).view(b, 1, length, 1)
            g, k = g * keep, k * keep
        cumulative = g.cumsum(2)
        visible = lower_triangle(length, q.device)
        exponent = (cumulative.unsqueeze(3) - cumulative.unsqueeze(2)).clamp(max=0)  # [B, H, L, L, d]
        scores = ((q / math.sqrt(d)).unsqueeze(3) * k.unsqueeze(2) * exponent.exp()).sum(-1).masked_fill(~visible, 0.0)
        return self.normed(scores @ v)

    def step(self, q, k, v, state, position, total_length):
        b, h, n, d = q.shape
        g = self.gates(k)
        sums = state['sums'] if state is not None else q.new_zeros(b, h, d, v.shape[-1])
        outputs = []
        for t in range(n):
            sums = g[:, :, t].exp().unsqueeze(-1) * sums + k[:, :, t].unsqueeze(-1) * v[:, :, t].unsqueeze(-2)
            outputs.append((q[:, :, t].unsqueeze(-2) / math.sqrt(d)) @ sums)
        return self.normed(torch.cat(outputs, 2)), {'sums': sums}


MECHANISMS = {
    'softmax': Softmax,
    'yat-spherical': YatSpherical,
    'slay': Slay,
    'performer': Performer,
    'darkformer': Darkformer,
    'schoenbat': Schoenbat,
    'linear-elu': LinearElu,
    'cosformer': Cosformer,
    'gla': Gla,
}


def create_mechanism(config, layer):
    attention = config.slayformer['attention']
    name, options = attention['name'], attention.get('options', {})
    if name not in MECHANISMS:
        raise ValueError(f'config.json slayformer.attention.name {name!r} is not implemented here (known: {", ".join(MECHANISMS)})')
    if name == 'schoenbat':
        layers = config.slayformer.get('layers')
        if not layers or 'maclaurinDegrees' not in layers[layer]:
            raise ValueError(
                "config.json: slayformer.layers[i].maclaurinDegrees (SchoenbAt's feature degrees) is missing; export the checkpoint again with this version of slayformer"
            )
        return Schoenbat(config, options, layers[layer]['maclaurinDegrees'])
    return MECHANISMS[name](config, options)


# ---------------------------------------------------------------------------------------------------
# The transformer body (src/model/transformer.ts) in GPT-2's and BERT's tensor names (src/hf/weights.ts)


def _sizes(config):
    if config.model_type == SlayformerGPT2Config.model_type:
        width = config.n_embd
        return {
            'width': width,
            'layers': config.n_layer,
            'heads': config.n_head,
            'positions': config.n_positions,
            'inner': config.n_inner or 4 * width,
            'activation': config.activation_function,
            'eps': config.layer_norm_epsilon,
            'dropout': config.resid_pdrop,
        }
    return {
        'width': config.hidden_size,
        'layers': config.num_hidden_layers,
        'heads': config.num_attention_heads,
        'positions': config.max_position_embeddings,
        'inner': config.intermediate_size,
        'activation': config.hidden_act,
        'eps': config.layer_norm_eps,
        'dropout': config.hidden_dropout_prob,
    }


def activation_of(name):
    if name in TANH_GELUS:
        return lambda x: F.gelu(x, approximate='tanh')
    if name in ERF_GELUS:
        return F.gelu
    raise ValueError(f'config.json: activation {name!r} is not one of {", ".join(TANH_GELUS + ERF_GELUS)}')


class RMSNorm(nn.Module):
    """layers.ts rmsNorm: x / sqrt(mean(x^2) + eps) * weight, no bias (model.norm rmsnorm; Llama's)."""

    def __init__(self, width, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(section, width, eps):
    """The body's norm (section.norm, absent in exports before it: LayerNorm)."""
    return RMSNorm(width, eps) if section.get('norm', 'layernorm') == 'rmsnorm' else nn.LayerNorm(width, eps=eps)


def rotary(x, start, theta):
    """layers.ts rotary: x [B, H, L, Dh] at positions start … start + L - 1, channel i paired with i + Dh/2 and
    rotated by position * theta^(-2i/Dh) (Llama's rotate_half layout); the angles in float64."""
    length, dim = x.shape[2], x.shape[3]
    half = dim // 2
    positions = torch.arange(start, start + length, dtype=torch.float64, device=x.device)
    inverse = torch.tensor([theta ** (-2 * i / dim) for i in range(half)], dtype=torch.float64, device=x.device)
    angles = positions.unsqueeze(1) * inverse.unsqueeze(0)  # [L, Dh/2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


class Dense(nn.Module):
    """x W + b: weight [in, out] (GPT-2's Conv1D) or, `transposed`, [out, in] (nn.Linear, BERT)."""

    def __init__(self, n_in, n_out, bias, transposed=False):
        super().__init__()
        self.transposed = transposed
        self.weight = nn.Parameter(torch.empty((n_out, n_in) if transposed else (n_in, n_out)))
        self.bias = nn.Parameter(torch.zeros(n_out)) if bias else None

    def forward(self, x):
        y = x @ (self.weight.T if self.transposed else self.weight)
        return y if self.bias is None else y + self.bias


class Weight(nn.Module):
    """A lone table (token-type embeddings of a GPT), named `<module>.weight`."""

    def __init__(self, rows, width):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, width))


class Gpt2Layer(nn.Module):
    def __init__(self, width, inner, section, eps):
        super().__init__()
        bias = section['bias']
        self.ln_1 = make_norm(section, width, eps)
        self.attn = nn.Module()
        self.attn.c_attn = Dense(width, 3 * width, bias)
        self.attn.c_proj = Dense(width, width, bias)
        self.ln_2 = make_norm(section, width, eps)
        self.mlp = nn.Module()
        self.mlp.c_fc = Dense(width, inner, bias)
        self.mlp.c_proj = Dense(inner, width, bias)
        if section.get('mlp') == 'swiglu':  # SwiGLU's gate (src/hf/weights.ts); c_fc is then its up projection
            self.mlp.c_gate = Dense(width, inner, bias)

    def qkv(self, x):
        return self.attn.c_attn(x).chunk(3, -1)

    parts = property(lambda self: (self.ln_1, self.attn.c_proj, self.ln_2, self.mlp.c_fc, self.mlp.c_proj))
    gate = property(lambda self: getattr(self.mlp, 'c_gate', None))


class BertLayer(nn.Module):
    def __init__(self, width, inner, section, eps):
        super().__init__()
        bias = section['bias']
        self.attention = nn.Module()
        self.attention.self = nn.Module()
        for name in ('query', 'key', 'value'):
            setattr(self.attention.self, name, Dense(width, width, bias, transposed=True))
        self.attention.output = nn.Module()
        self.attention.output.dense = Dense(width, width, bias, transposed=True)
        self.attention.output.LayerNorm = make_norm(section, width, eps)
        self.intermediate = nn.Module()
        self.intermediate.dense = Dense(width, inner, bias, transposed=True)
        if section.get('mlp') == 'swiglu':
            self.intermediate.gate = Dense(width, inner, bias, transposed=True)
        self.output = nn.Module()
        self.output.dense = Dense(inner, width, bias, transposed=True)
        self.output.LayerNorm = make_norm(section, width, eps)

    def qkv(self, x):
        s = self.attention.self
        return s.query(x), s.key(x), s.value(x)

    parts = property(
        lambda self: (self.attention.output.LayerNorm, self.attention.output.dense, self.output.LayerNorm, self.intermediate.dense, self.output.dense)
    )
    gate = property(lambda self: getattr(self.intermediate, 'gate', None))


class SlayformerPreTrainedModel(PreTrainedModel):
    """The body shared by the causal and the masked model: embeddings, blocks (pre- or post-LN) with the
    configured mechanism, final LayerNorm when pre-LN."""

    _supports_attention_backend = False

    def build_body(self, config):
        check_sizes(config.to_dict())  # again: a configuration's fields may have changed since it was built
        section = config.slayformer
        sizes = _sizes(config)
        self.sizes = sizes
        self.pre_norm = section['normPosition'] == 'pre'
        self.rope_theta = section.get('ropeTheta', 10000) if section.get('positional') == 'rope' else None
        self.act = activation_of(sizes['activation'])
        self.dropout = nn.Dropout(sizes['dropout'])
        width, eps = sizes['width'], sizes['eps']
        # Tensors with no place in transformers' layout live under `slayformer.` (src/hf/weights.ts).
        self.slayformer = nn.Module()
        self.slayformer.blocks = nn.ModuleList()
        for layer in range(sizes['layers']):
            block = nn.Module()
            block.attn = create_mechanism(config, layer)
            self.slayformer.blocks.append(block)
        return section, width, eps

    def _init_weights(self, module):
        # Only for tensors an export lacks (a model made from a config): the project's init, N(0, 0.02).
        if isinstance(module, (Dense, Weight, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if getattr(module, 'bias', None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)

    def run_blocks(self, x, layers, key_mask, total_length, cache=None):
        """The blocks on x [B, L, d] (after the embeddings), then the final LayerNorm of a pre-LN model. With a
        cache (causal only), x holds the positions after the cached ones, and each layer's state advances.
        Rotary positions (section.positional rope) turn q and k before the mechanism, as transformer.ts."""
        b, length, width = x.shape
        heads = self.sizes['heads']
        start = cache.length if cache is not None else 0
        for index, (layer, mechanism) in enumerate(zip(layers, (block.attn for block in self.slayformer.blocks))):
            ln1, out, ln2, fc, proj = layer.parts

            def attention(h):
                q, k, v = (t.view(b, length, heads, width // heads).transpose(1, 2) for t in layer.qkv(h))
                if self.rope_theta is not None:
                    q, k = rotary(q, start, self.rope_theta), rotary(k, start, self.rope_theta)
                if cache is None:
                    attended = mechanism(q, k, v, key_mask, total_length)
                else:
                    attended, cache.layers[index] = mechanism.step(q, k, v, cache.layers[index], cache.length, total_length)
                return out(attended.transpose(1, 2).reshape(b, length, width))

            def mlp(h):
                if layer.gate is not None:
                    return proj(F.silu(layer.gate(h)) * fc(h))
                return proj(self.act(fc(h)))

            for norm, branch in ((ln1, attention), (ln2, mlp)):
                x = x + self.dropout(branch(norm(x))) if self.pre_norm else norm(x + self.dropout(branch(x)))
        return x

    def check_length(self, input_ids, before=0):
        if before + input_ids.shape[1] > self.sizes['positions']:
            raise ValueError(f"sequence length {before + input_ids.shape[1]} exceeds the model's {self.sizes['positions']} positions")


class SlayformerCache:
    """What generate() carries between steps: per layer, the mechanism's state (`step` in the mechanisms: the
    keys and values of softmax and exact Yat, the running sums of the kernel mechanisms), and how many
    positions it covers. transformers' own caches hold keys and values only, so this is a class of its own;
    it has what GenerationMixin asks of a cache (the length, beam reordering, not compileable, not croppable)."""

    is_compileable = False
    is_croppable = False

    def __init__(self, num_layers):
        self.layers = [None] * num_layers
        self.length = 0

    def get_seq_length(self, layer_idx=0):
        return self.length

    def reorder_cache(self, beam_idx):
        """Beam search: keep the sequences `beam_idx` names, in that order."""
        self.layers = [None if state is None else {name: t.index_select(0, beam_idx.to(t.device)) for name, t in state.items()} for state in self.layers]


class SlayformerForCausalLM(SlayformerPreTrainedModel, GenerationMixin):
    """The GPT: causal attention, head tied to the token embedding (logits = h E^T)."""

    config_class = SlayformerGPT2Config

    def __init__(self, config):
        super().__init__(config)
        section, width, eps = self.build_body(config)
        sizes = self.sizes
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(config.vocab_size, width)
        if self.rope_theta is None:
            self.transformer.wpe = nn.Embedding(sizes['positions'], width)
        self.transformer.h = nn.ModuleList(Gpt2Layer(width, sizes['inner'], section, eps) for _ in range(sizes['layers']))
        if self.pre_norm:
            self.transformer.ln_f = make_norm(section, width, eps)
        self.slayformer.embed = nn.Module()
        if section['typeVocabSize'] > 0:
            self.slayformer.embed.types = Weight(section['typeVocabSize'], width)
        if section['embeddingNorm']:
            self.slayformer.embed.norm = make_norm(section, width, eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.transformer.wte

    def forward(self, input_ids, attention_mask=None, labels=None, decoding=False, past_key_values=None, use_cache=False, **kwargs):
        """Logits [B, L, V]. The project's GPT trains on packed sequences and reads no attention mask: padding
        may only follow the real tokens (right padding), whose outputs it does not change. `decoding`
        (set by generate()) makes cosFormer re-weight by the model's maximum length, as the project's decoder.
        `use_cache` returns a SlayformerCache as past_key_values; given one, input_ids are the positions after
        those it holds (attention_mask, if any, covers all of them), and it advances in place."""
        if attention_mask is not None and bool((attention_mask[:, 1:] > attention_mask[:, :-1]).any()):
            raise ValueError('slayformer GPT: attention_mask has padding before real tokens; only right padding is supported')
        if past_key_values is not None and not isinstance(past_key_values, SlayformerCache):
            raise ValueError(f'slayformer GPT: past_key_values must be the SlayformerCache this model returned (got {type(past_key_values).__name__})')
        cache = past_key_values if past_key_values is not None else (SlayformerCache(self.sizes['layers']) if use_cache else None)
        start = cache.length if cache is not None else 0
        self.check_length(input_ids, start)
        length = input_ids.shape[1]
        embed = self.slayformer.embed
        x = self.transformer.wte(input_ids)
        if self.rope_theta is None:
            x = x + self.transformer.wpe.weight[start : start + length]
        if hasattr(embed, 'types'):
            x = x + embed.types.weight[0]
        if hasattr(embed, 'norm'):
            x = embed.norm(x)
        # cosFormer's M: the model's maximum length while decoding (each step must see the prompt's M).
        total_length = self.sizes['positions'] if decoding or cache is not None else length
        x = self.run_blocks(self.dropout(x), self.transformer.h, None, total_length, cache)
        if cache is not None:
            cache.length += length
        if self.pre_norm:
            x = self.transformer.ln_f(x)
        logits = x @ self.transformer.wte.weight.T
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=cache)

    @classmethod
    def _supports_default_dynamic_cache(cls):
        return False  # generate() must not make a DynamicCache: forward makes its SlayformerCache

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None, use_cache=True, **kwargs):
        """The first step feeds the prompt and returns the cache; each later step feeds only the positions the
        cache lacks (one token). With use_cache=False every step runs the whole sequence so far."""
        if past_key_values is not None:
            input_ids = input_ids[:, past_key_values.get_seq_length() :]
        return {'input_ids': input_ids, 'attention_mask': attention_mask, 'decoding': True, 'past_key_values': past_key_values, 'use_cache': use_cache}


class SlayformerForMaskedLM(SlayformerPreTrainedModel):
    """The BERT: bidirectional attention with the padding key mask, BERT's MLM head (dense, activation,
    LayerNorm, decoder tied to the word embeddings plus cls.predictions.bias)."""

    config_class = SlayformerBertConfig

    def __init__(self, config):
        super().__init__(config)
        section, width, eps = self.build_body(config)
        sizes = self.sizes
        self.bert = nn.Module()
        self.bert.embeddings = nn.Module()
        embeddings = self.bert.embeddings
        embeddings.word_embeddings = nn.Embedding(config.vocab_size, width)
        if self.rope_theta is None:
            embeddings.position_embeddings = nn.Embedding(sizes['positions'], width)
        if section['typeVocabSize'] > 0:
            embeddings.token_type_embeddings = nn.Embedding(section['typeVocabSize'], width)
        if section['embeddingNorm']:
            embeddings.LayerNorm = make_norm(section, width, eps)
        self.bert.encoder = nn.Module()
        self.bert.encoder.layer = nn.ModuleList(BertLayer(width, sizes['inner'], section, eps) for _ in range(sizes['layers']))
        if self.pre_norm:
            self.slayformer.norm = make_norm(section, width, eps)
        self.cls = nn.Module()
        self.cls.predictions = nn.Module()
        self.cls.predictions.transform = nn.Module()
        self.cls.predictions.transform.dense = Dense(width, width, True, transposed=True)
        self.cls.predictions.transform.LayerNorm = nn.LayerNorm(width, eps=eps)
        self.cls.predictions.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.post_init()

    def get_input_embeddings(self):
        return self.bert.embeddings.word_embeddings

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, **kwargs):
        """Logits [B, L, V]; attention_mask [B, L] 1/0 masks padded keys. Every token is type 0 (one segment per sequence)."""
        if token_type_ids is not None and bool(token_type_ids.any()):
            raise ValueError('slayformer BERT: every token is type 0 (one segment per sequence); token_type_ids must be all 0')
        self.check_length(input_ids)
        length = input_ids.shape[1]
        embeddings = self.bert.embeddings
        x = embeddings.word_embeddings(input_ids)
        if self.rope_theta is None:
            x = x + embeddings.position_embeddings.weight[:length]
        if hasattr(embeddings, 'token_type_embeddings'):
            x = x + embeddings.token_type_embeddings.weight[0]
        if hasattr(embeddings, 'LayerNorm'):
            x = embeddings.LayerNorm(x)
        x = self.run_blocks(self.dropout(x), self.bert.encoder.layer, attention_mask, length)
        if self.pre_norm:
            x = self.slayformer.norm(x)
        transform = self.cls.predictions.transform
        h = transform.LayerNorm(self.act(transform.dense(x)))
        logits = h @ embeddings.word_embeddings.weight.T + self.cls.predictions.bias
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        return MaskedLMOutput(loss=loss, logits=logits)
