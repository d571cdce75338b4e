// The kernel-fidelity harness behind `npm run ablate`.
import { beforeAll, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { fidelityMarkdown, paperCases, PAPER_SCALES, runFidelity } from '../../src/paper/fidelity.ts';

const settings = { embed: 16, heads: 2, batch: 2, causal: true, seeds: [0, 1] };
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
