// The kernel-fidelity harness behind `npm run ablate`.
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { slayQuadrature, quadratureYatKernel } from '../../src/model/features/quadrature.ts';
import { fidelityMarkdown, paperCases, PAPER_SCALES, runFidelity } from '../../src/paper/fidelity.ts';
import { limitKernel, limitRelL2 } from '../../src/paper/slay-limits.ts';

const settings = { embed: 16, heads: 2, batch: 2, causal: true, seeds: [0, 1], projections: 'plain' as const };
const softmax = { mechanism: 'softmax', options: {} };

beforeAll(async () => {
  await initBackend('cpu');
});

it('scores a mechanism against itself as exact and a different one as not, per seed', async () => {
  const rows = await runFidelity(
    [
      { label: 'self', mechanism: 'softmax', options: {}, reference: softmax },
      { label: 'elu', mechanism: 'linear-elu', options: {}, reference: softmax },
      { label: 'broken', mechanism: 'no-such-attention', options: {}, reference: softmax },
    ],
    12,
    settings,
  );
  expect(rows[0]).toMatchObject({ status: 'ok', seeds: 2 });
  expect(rows[0].relL2).toBeLessThan(1e-6);
  expect(rows[0].cosine).toBeCloseTo(1, 6);
  expect(rows[0].mse).toBeLessThan(1e-12);
  expect(rows[1].relL2).toBeGreaterThan(1e-2);
  expect(rows[1].cosine).toBeLessThan(1);
  expect(rows[2].status).toMatch(/^error: unknown attention 'no-such-attention'/);
  const table = fidelityMarkdown(rows);
  expect(table.split('\n')).toHaveLength(2 + 3);
  expect(table).toContain('| 12 | broken | error:');
});

it("builds the paper's ablation set at each scale: seven SLAY variants against spherical Yat, two against softmax", () => {
  for (const scale of PAPER_SCALES) {
    const cases = paperCases(scale);
    expect(cases.map((c) => c.label).sort()).toEqual(
      [
        'darkformer',
        'performer',
        ...['anchor', 'exact', 'hadamard', 'laplace-only', 'nystrom', 'random-maclaurin', 'tensorsketch'].map((p) => `slay/${p}`),
      ].sort(),
    );
    for (const c of cases.filter((x) => x.mechanism === 'slay')) {
      expect(c.reference).toEqual({ mechanism: 'yat-spherical', options: { epsilon: 1e-6, delta: 1e-6 } });
      expect(c.options).toMatchObject({ quadratureNodes: scale.quadratureNodes, prfFeatures: scale.prfFeatures, anchors: scale.anchors, epsilon: 1e-6 });
    }
  }
});

describe('the float64 limits (src/paper/slay-limits.ts) and the harness measure the same thing', () => {
  // Two implementations of one number on the same draw: the harness's float32 yat-spherical at ε = 0.05 against
  // ε = 1e-6, and limitRelL2 with the ε = 0.05 kernel in float64. They agree only if the draw, the projections (with
  // and without the output projection) and the normalisation are the same.
  const yat = (epsilon: number) => ({ mechanism: 'yat-spherical', options: { epsilon, delta: 1e-6 } });
  for (const projections of ['plain', 'torch-linear'] as const) {
    it(`${projections} projections`, async () => {
      const these = { ...settings, projections };
      const [row] = await runFidelity([{ label: 'wide', ...yat(0.05), reference: yat(1e-6) }], 12, these);
      const kernel = (x: number) => (x * x) / (2.05 - 2 * x);
      const limits = these.seeds.map((seed) => limitRelL2(kernel, these, 12, seed, 1e-6));
      expect(limits[0]).toBeGreaterThan(1e-3);
      for (const [i, value] of row.relL2PerSeed.entries()) expect(Math.abs(value - limits[i])).toBeLessThan(1e-4 * limits[i] + 1e-6);
      expect(limitRelL2((x) => (x * x) / (2 + 1e-6 - 2 * x), these, 12, 0, 1e-6)).toBeLessThan(1e-12);
    });
  }

  it('each limit kernel is the estimator’s expectation: exact → the quadrature kernel, anchor → (1 + 2x²)·Σ w e^{2sx}', () => {
    const rule = slayQuadrature(2, 1e-3);
    for (const x of [-0.9, -0.2, 0, 0.3, 0.99]) {
      expect(limitKernel('exact', rule)(x)).toBeCloseTo(quadratureYatKernel(x, rule), 12);
      expect(limitKernel('anchor', rule)(x)).toBeCloseTo((1 + 2 * x * x) * limitKernel('laplace-only', rule)(x), 12);
    }
  });
});
