// Kernel-fidelity ablation (SLAY paper, Tables 2 and 10): every approximate mechanism against the
// exact attention it approximates, on the same inputs. Harness as the reference's
// tests/ablation_poly_approx.py: embedding 64, 4 heads, batch 8, fp32, q/k/v/out projections of x ~ N(0, I) shared
// by estimator and reference per seed (FidelityProjections), metrics rel-ℓ2, cosine, MSE and forward latency.
import * as tf from '@tensorflow/tfjs';
import { createAttention } from '../model/attention/index.ts';
import { dense } from '../model/ops.ts';
import { type DrawnLinear, drawFidelityInputs, type FidelityCase, type FidelityRow, type FidelitySettings } from './fidelity-cases.ts';

export { PAPER_SCALES, PAPER_SETTINGS, paperCases, SLAY_POLYS } from './fidelity-cases.ts';
export type { FidelityCase, FidelityProjections, FidelityRow, FidelityScale, FidelitySettings } from './fidelity-cases.ts';

interface FidelityInputs {
  /** [batch, heads, length, headDim] each. */
  qkv: [tf.Tensor4D, tf.Tensor4D, tf.Tensor4D];
  /** What is compared, from an attention output (a new tensor). */
  output(y: tf.Tensor4D): tf.Tensor;
  dispose(): void;
}

/** One seed's q, k, v and output map under the settings' projections (fidelity-cases.ts, drawFidelityInputs). */
function inputs(settings: FidelitySettings, length: number, seed: number): FidelityInputs {
  const { embed, heads, batch } = settings;
  const headDim = embed / heads;
  const draw = drawFidelityInputs(settings, length, seed);
  const x = tf.tensor3d(Float32Array.from(draw.x), [batch, length, embed]);
  const affine = (z: tf.Tensor3D, layer: DrawnLinear) =>
    tf.tidy(() => {
      const y = dense(z, tf.tensor2d(Float32Array.from(layer.w), [embed, embed]));
      return layer.b ? tf.add(y, tf.tensor1d(Float32Array.from(layer.b))) : y;
    });
  const project = (layer: DrawnLinear) =>
    tf.tidy(() => tf.transpose(tf.reshape(affine(x, layer), [batch, length, heads, headDim]), [0, 2, 1, 3]) as tf.Tensor4D);
  const qkv: [tf.Tensor4D, tf.Tensor4D, tf.Tensor4D] = [project(draw.q), project(draw.k), project(draw.v)];
  x.dispose();
  const out = draw.out;
  return {
    qkv,
    output: (y) => (out ? tf.tidy(() => affine(tf.reshape(tf.transpose(y, [0, 2, 1, 3]), [batch, length, embed]) as tf.Tensor3D, out)) : y.clone()),
    dispose: () => tf.dispose(qkv),
  };
}

function stats(values: number[]): { mean: number; sd: number } {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  const sd = values.length > 1 ? Math.sqrt(values.reduce((a, b) => a + (b - mean) ** 2, 0) / (values.length - 1)) : 0;
  return { mean, sd };
}

/** rel-ℓ2 ‖y − y*‖/‖y*‖, cosine of the flattened outputs, and mean squared error. */
function compare(out: Float32Array, expected: Float32Array): { relL2: number; cosine: number; mse: number } {
  let diff = 0;
  let norm = 0;
  let dotp = 0;
  let outNorm = 0;
  for (let i = 0; i < out.length; i++) {
    diff += (out[i] - expected[i]) ** 2;
    norm += expected[i] ** 2;
    dotp += out[i] * expected[i];
    outNorm += out[i] ** 2;
  }
  return { relL2: Math.sqrt(diff / norm), cosine: dotp / Math.sqrt(norm * outNorm), mse: diff / out.length };
}

/** What is compared from attention output `y` (disposed). */
async function comparedOutput(y: tf.Tensor4D, compared: (y: tf.Tensor4D) => tf.Tensor): Promise<Float32Array> {
  const out = compared(y);
  y.dispose();
  const data = (await out.data()) as Float32Array;
  out.dispose();
  return data;
}

async function timedForward(fn: () => tf.Tensor): Promise<{ out: Float32Array; ms: number }> {
  const t0 = performance.now();
  const t = fn();
  const out = (await t.data()) as Float32Array;
  const ms = performance.now() - t0;
  t.dispose();
  return { out, ms };
}

export async function runFidelity(cases: FidelityCase[], length: number, settings: FidelitySettings): Promise<FidelityRow[]> {
  const { heads, embed, causal } = settings;
  const headDim = embed / heads;
  const perCase = new Map<string, { relL2: number[]; cosine: number[]; mse: number[]; ms: number[] }>();
  const failures = new Map<string, string>();
  for (const seed of settings.seeds) {
    const seedInputs = inputs(settings, length, seed);
    const [q, k, v] = seedInputs.qkv;
    const compared = (y: tf.Tensor4D) => tf.tidy(() => seedInputs.output(y));
    const references = new Map<string, Float32Array>();
    for (const c of cases) {
      if (failures.has(c.label)) continue;
      try {
        const refKey = JSON.stringify(c.reference);
        if (!references.has(refKey)) {
          const ref = createAttention(c.reference.mechanism, { numHeads: heads, headDim, causal, seed, ...c.reference.options });
          references.set(refKey, await comparedOutput(ref.apply(q, k, v), compared));
          ref.dispose();
        }
        const attn = createAttention(c.mechanism, { numHeads: heads, headDim, causal, seed, ...c.options });
        await timedForward(() => attn.apply(q, k, v)); // warm-up
        const { out: y, ms } = await timedForward(() => attn.apply(q, k, v));
        const out = await comparedOutput(tf.tensor4d(y, q.shape), compared);
        attn.dispose();
        const entry = perCase.get(c.label) ?? { relL2: [], cosine: [], mse: [], ms: [] };
        const metrics = compare(out, references.get(refKey)!);
        entry.relL2.push(metrics.relL2);
        entry.cosine.push(metrics.cosine);
        entry.mse.push(metrics.mse);
        entry.ms.push(ms);
        perCase.set(c.label, entry);
      } catch (err) {
        const message = (err as Error).message?.split('\n')[0] ?? String(err);
        failures.set(c.label, `${/memory|allocat|RangeError/i.test(message) ? 'OOM' : 'error'}: ${message.slice(0, 120)}`);
      }
    }
    seedInputs.dispose();
  }
  return cases.map((c) => {
    const failure = failures.get(c.label);
    const e = perCase.get(c.label);
    if (failure || !e) {
      const none = { relL2: NaN, cosine: NaN, mse: NaN };
      return { label: c.label, length, status: failure ?? 'error', ...none, forwardMs: NaN, sd: none, seeds: 0, relL2PerSeed: [] };
    }
    const [r, cs, m] = [stats(e.relL2), stats(e.cosine), stats(e.mse)];
    return {
      label: c.label,
      length,
      status: 'ok',
      relL2: r.mean,
      cosine: cs.mean,
      mse: m.mean,
      forwardMs: stats(e.ms).mean,
      sd: { relL2: r.sd, cosine: cs.sd, mse: m.sd },
      seeds: settings.seeds.length,
      relL2PerSeed: e.relL2,
    };
  });
}

export function fidelityMarkdown(rows: FidelityRow[]): string {
  const fmt = (x: number) => (Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-3 && x !== 0) ? x.toExponential(2) : x.toFixed(4));
  const lines = [
    '| T | method | rel-ℓ2 (mean ± sd) | cosine | MSE | forward ms |',
    '| ---: | --- | --- | ---: | ---: | ---: |',
    ...rows.map((r) =>
      r.status === 'ok'
        ? `| ${r.length} | ${r.label} | ${fmt(r.relL2)} ± ${fmt(r.sd.relL2)} | ${fmt(r.cosine)} | ${fmt(r.mse)} | ${r.forwardMs.toFixed(1)} |`
        : `| ${r.length} | ${r.label} | ${r.status} | | | |`,
    ),
  ];
  return lines.join('\n');
}
