// The Transformer++ options (model.positional rope, model.mlp swiglu, model.norm rmsnorm, model.bias false) against a
// float64 reference written from their definitions — plain loops over the model's own weights, no tfjs — for softmax
// and for a kernel mechanism (rotary positions before its feature map); and what follows from them: the tensors
// a config builds (no position table, a gate, norms without biases), configs saved before them, and the FLOPs.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { Rng } from '../../src/core/rng.ts';
import { IncrementalDecoder } from '../../src/model/decode.ts';
import { modelFlops } from '../../src/model/flops.ts';
import { createLanguageModel, languageModelParameterSpecs, type LanguageModel, type LanguageModelConfig } from '../../src/model/lm.ts';
import { checkModelConfig } from '../../src/store/model-check.ts';
import { testBackend } from '../helpers/backend.ts';
import { perturbParameters } from '../helpers/perturb.ts';
import { dot, relL2 } from '../helpers/reference.ts';

const VOCAB = 19;
const LENGTH = 7;
const D = 16;
const HEADS = 2;
const EPS = 1e-6;
const THETA = 500;

const TRANSFORMER_PP = { positional: 'rope', ropeTheta: THETA, mlp: 'swiglu', norm: 'rmsnorm', bias: false, layerNormEps: EPS } as const;

function config(attention: string, options: Record<string, unknown> = {}): LanguageModelConfig {
  return {
    kind: 'gpt',
    vocabSize: VOCAB,
    maxSeqLen: 12,
    dModel: D,
    numLayers: 2,
    numHeads: HEADS,
    mlpRatio: 1.5,
    dropout: 0,
    attention: { name: attention, options },
    seed: 5,
    ...TRANSFORMER_PP,
  };
}

type Matrix = number[][];
const matmul = (x: Matrix, w: Matrix): Matrix => x.map((row) => w[0].map((_, j) => row.reduce((s, v, i) => s + v * w[i][j], 0)));
const rms = (x: Matrix, g: number[]): Matrix =>
  x.map((row) => {
    const r = 1 / Math.sqrt(row.reduce((s, v) => s + v * v, 0) / row.length + EPS);
    return row.map((v, j) => v * r * g[j]);
  });
const silu = (v: number) => v / (1 + Math.exp(-v));
const eluPlusOne = (v: number) => (v < 0 ? Math.exp(v) : v + 1);

/** Rotary embedding of one head's vector at `position`: channel i pairs with i + Dh/2, angle position·θ^(−2i/Dh). */
function rotate(x: number[], position: number): number[] {
  const half = x.length / 2;
  const out = [...x];
  for (let i = 0; i < half; i++) {
    const angle = position * THETA ** ((-2 * i) / x.length);
    out[i] = x[i] * Math.cos(angle) - x[i + half] * Math.sin(angle);
    out[i + half] = x[i + half] * Math.cos(angle) + x[i] * Math.sin(angle);
  }
  return out;
}

/** One causal head: rows q, k, v [L][Dh] → [L][Dh]. */
function head(q: Matrix, k: Matrix, v: Matrix, attention: string): Matrix {
  return q.map((qi, i) => {
    const weights = k.slice(0, i + 1).map((kj) => {
      if (attention === 'softmax') return dot(qi, kj) / Math.sqrt(qi.length);
      return dot(qi.map(eluPlusOne), kj.map(eluPlusOne));
    });
    let w = weights;
    let delta = 1e-6; // linear-elu's default δ
    if (attention === 'softmax') {
      const m = Math.max(...weights);
      w = weights.map((s) => Math.exp(s - m));
      delta = 0;
    }
    const sum = w.reduce((a, b) => a + b, 0) + delta;
    return qi.map((_, c) => w.reduce((acc, wj, j) => acc + wj * v[j][c], 0) / sum);
  });
}

/** The model's logits [L][V] for one row of ids, in float64 from its weights (`rotary` false: without the rotation). */
function referenceLogits(model: LanguageModel, ids: number[], attention: string, rotary = true): Matrix {
  const w = new Map([...model.parameters()].map(([name, t]) => [name, t.arraySync() as number[] & Matrix]));
  const get = (name: string) => {
    const t = w.get(name);
    if (!t) throw new Error(`no ${name}`);
    return t;
  };
  const dh = D / HEADS;
  let x: Matrix = ids.map((id) => [...get('embed.tokens.weight')[id]]);
  for (let layer = 0; layer < 2; layer++) {
    const p = `blocks.${layer}`;
    const h = rms(x, get(`${p}.ln1.weight`));
    const [q, k, v] = ['q', 'k', 'v'].map((n) => matmul(h, get(`${p}.attn.${n}.weight`)));
    const merged: Matrix = ids.map(() => []);
    for (let hd = 0; hd < HEADS; hd++) {
      const part = (m: Matrix) => m.map((row) => row.slice(hd * dh, (hd + 1) * dh));
      const out = head(
        part(q).map((r, t) => (rotary ? rotate(r, t) : r)),
        part(k).map((r, t) => (rotary ? rotate(r, t) : r)),
        part(v),
        attention,
      );
      out.forEach((row, t) => merged[t].push(...row));
    }
    const attended = matmul(merged, get(`${p}.attn.out.weight`));
    x = x.map((row, t) => row.map((val, j) => val + attended[t][j]));
    const h2 = rms(x, get(`${p}.ln2.weight`));
    const gate = matmul(h2, get(`${p}.mlp.gate.weight`));
    const up = matmul(h2, get(`${p}.mlp.fc.weight`));
    const mlp = matmul(
      gate.map((row, t) => row.map((g, j) => silu(g) * up[t][j])),
      get(`${p}.mlp.proj.weight`),
    );
    x = x.map((row, t) => row.map((val, j) => val + mlp[t][j]));
  }
  const final = rms(x, get('norm.weight'));
  return final.map((row) => get('embed.tokens.weight').map((e: number[]) => dot(row, e)));
}

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
});

describe('Transformer++ options', () => {
  for (const attention of ['softmax', 'linear-elu']) {
    it(`${attention}: rotary positions, SwiGLU, RMSNorm and no biases give the float64 reference's logits`, () => {
      const model = perturbParameters(createLanguageModel(config(attention, attention === 'softmax' ? {} : { chunkSize: 3 })), 11);
      try {
        const ids = Array.from({ length: LENGTH }, (_, i) => (i * 7 + 3) % VOCAB);
        const ours = tf.tidy(() => model.logits(tf.tensor2d([ids], [1, LENGTH], 'int32')).arraySync()[0]);
        expect(relL2(ours, referenceLogits(model, ids, attention))).toBeLessThan(1e-5);
        // The rotation is no near-identity at these positions: the reference without it is far off.
        expect(relL2(ours, referenceLogits(model, ids, attention, false))).toBeGreaterThan(1e-2);
      } finally {
        model.dispose();
      }
    });
  }

  it('builds no position table, a gate beside fc, norms without biases and no linear biases', () => {
    const names = languageModelParameterSpecs(config('softmax')).map((s) => s.name);
    expect(names).not.toContain('embed.positions.weight');
    expect(names).toContain('blocks.0.mlp.gate.weight');
    expect(names.filter((n) => n.endsWith('.bias'))).toEqual([]);
    const gpt2 = languageModelParameterSpecs({ ...config('softmax'), positional: 'learned', mlp: 'gelu', norm: 'layernorm', bias: true }).map((s) => s.name);
    expect(gpt2).toContain('embed.positions.weight');
    expect(gpt2).not.toContain('blocks.0.mlp.gate.weight');
    expect(gpt2).toContain('blocks.0.ln1.bias');
  });

  it('counts the gate in the model FLOPs: 6·d·hidden more per layer and token', () => {
    const swiglu = modelFlops(config('softmax'), LENGTH);
    const gelu = modelFlops({ ...config('softmax'), mlp: 'gelu' }, LENGTH);
    expect(swiglu.dense - gelu.dense).toBe(6 * 2 * D * Math.round(1.5 * D));
  });

  it('a saved config without the options is GPT-2’s; a bad value or an odd head size is an error naming the key', () => {
    const { positional, ropeTheta, mlp, norm, ...before } = { ...config('softmax'), vocabSize: VOCAB };
    const old = checkModelConfig(before, 'old.safetensors');
    expect([old.positional, old.ropeTheta, old.mlp, old.norm]).toEqual(['learned', 10000, 'gelu', 'layernorm']);
    expect([positional, ropeTheta, mlp, norm]).toEqual(['rope', THETA, 'swiglu', 'rmsnorm']);
    expect(() => checkModelConfig({ ...config('softmax'), norm: 'batchnorm' }, 'x.safetensors')).toThrow(
      /x\.safetensors.*model\.norm must be one of layernorm, rmsnorm/s,
    );
    expect(() => createLanguageModel({ ...config('softmax'), dModel: 6, numHeads: 2 })).toThrow(/model\.positional 'rope'.*head size.*\(3\) must be even/);
  });

  it('decoding applies the rotation at each position: incremental logits equal the full forward', () => {
    for (const attention of ['softmax', 'linear-elu']) {
      const model = perturbParameters(createLanguageModel(config(attention)), 12);
      try {
        const rng = new Rng(2);
        const ids = Array.from({ length: 10 }, () => rng.int(VOCAB));
        const full = tf.tidy(() => model.logits(tf.tensor2d([ids], [1, ids.length], 'int32')).arraySync()[0]);
        const decoder = new IncrementalDecoder(model, 1);
        const prefill = decoder.feedBlock([ids.slice(0, 4)]);
        expect(relL2(prefill.arraySync()[0], full[3])).toBeLessThan(1e-5);
        prefill.dispose();
        for (let t = 4; t < ids.length; t++) {
          const logits = decoder.feed([ids[t]]);
          expect(relL2(logits.arraySync()[0], full[t])).toBeLessThan(1e-5);
          logits.dispose();
        }
        decoder.dispose();
      } finally {
        model.dispose();
      }
    }
  });
});
