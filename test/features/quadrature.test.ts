import { describe, expect, it } from 'vitest';
import { gaussLaguerre, quadratureYatKernel, slayQuadrature } from '../../src/model/features/quadrature.ts';

describe('gaussLaguerre (Golub–Welsch)', () => {
  it('integrates ∫₀^∞ e^{−t} tⁿ dt = n! exactly for every n ≤ 2R − 1, R = 1…8', () => {
    for (let r = 1; r <= 8; r++) {
      const { nodes, weights } = gaussLaguerre(r);
      expect(nodes).toHaveLength(r);
      let factorial = 1;
      for (let n = 0; n <= 2 * r - 1; n++) {
        if (n > 0) factorial *= n;
        const integral = nodes.reduce((acc, t, i) => acc + weights[i] * t ** n, 0);
        expect(Math.abs(integral - factorial) / factorial, `R=${r}, n=${n}`).toBeLessThan(1e-10);
      }
    }
  });

  it('is not exact one degree higher (so the test above has teeth)', () => {
    const { nodes, weights } = gaussLaguerre(3);
    const integral = nodes.reduce((acc, t, i) => acc + weights[i] * t ** 6, 0);
    expect(Math.abs(integral - 720) / 720).toBeGreaterThan(1e-3);
  });

  it('matches the closed form at R = 2: t = 2 ∓ √2, α = (2 ± √2)/4', () => {
    const { nodes, weights } = gaussLaguerre(2);
    expect(nodes[0]).toBeCloseTo(2 - Math.SQRT2, 13);
    expect(nodes[1]).toBeCloseTo(2 + Math.SQRT2, 13);
    expect(weights[0]).toBeCloseTo((2 + Math.SQRT2) / 4, 13);
    expect(weights[1]).toBeCloseTo((2 - Math.SQRT2) / 4, 13);
  });

  it('keeps the tiny weights of large nodes accurate at R = 32 (Σα = 1, Σα·e^{t/2} = 2)', () => {
    // ∫ e^{−t} e^{t/2} dt = 2 is dominated by the largest nodes, whose weights are ~1e-50.
    const { nodes, weights } = gaussLaguerre(32);
    expect(weights.every((w) => w > 0)).toBe(true);
    expect(weights.reduce((a, w) => a + w, 0)).toBeCloseTo(1, 12);
    const integral = nodes.reduce((acc, t, i) => acc + weights[i] * Math.exp(t / 2), 0);
    expect(Math.abs(integral - 2) / 2).toBeLessThan(1e-6);
  });

  it('rejects R < 1 and non-integers, naming the allowed values', () => {
    expect(() => gaussLaguerre(0)).toThrow(/integer ≥ 1/);
    expect(() => gaussLaguerre(2.5)).toThrow(/integer ≥ 1/);
  });
});

describe('slayQuadrature', () => {
  it('scales the nodes by C = 2 + ε: s_r = t_r/C, w_r = α_r/C', () => {
    const eps = 1e-3;
    const { nodes, weights } = gaussLaguerre(3);
    const rule = slayQuadrature(3, eps);
    rule.scales.forEach((s, r) => expect(s).toBeCloseTo(nodes[r] / (2 + eps), 14));
    rule.weights.forEach((w, r) => expect(w).toBeCloseTo(weights[r] / (2 + eps), 14));
  });

  it('gives the peak Σ_r w_r e^{2 s_r} of docs/notes/attention-kernels.md §1.4 (ε = 1e-3): 1.36, 2.99, 4.71, 13.8, 58', () => {
    const expected: Array<[number, number]> = [
      [1, 1.36],
      [2, 2.99],
      [3, 4.71],
      [8, 13.8],
      [32, 58],
    ];
    for (const [r, peak] of expected) {
      // x = 1: the kernel x² Σ w_r e^{2 s_r x} equals Σ w_r e^{2 s_r}; the exact kernel is 1/ε = 1000.
      const value = quadratureYatKernel(1, slayQuadrature(r, 1e-3));
      expect(Math.abs(value - peak) / peak, `R=${r}`).toBeLessThan(0.01);
    }
  });

  it('converges to 1/(C − 2x) away from x → 1 as R grows', () => {
    const eps = 1e-3;
    const c = 2 + eps;
    const xs = Array.from({ length: 31 }, (_, i) => -1 + i * 0.05); // −1 … 0.5
    const worst = (r: number) => {
      const rule = slayQuadrature(r, eps);
      return Math.max(...xs.map((x) => Math.abs(rule.scales.reduce((a, s, i) => a + rule.weights[i] * Math.exp(2 * s * x), 0) * (c - 2 * x) - 1)));
    };
    const errors = [1, 2, 4, 8, 16].map(worst);
    for (let i = 1; i < errors.length; i++) expect(errors[i]).toBeLessThan(errors[i - 1]);
    expect(errors[1]).toBeLessThan(0.05); // R = 2 is within a few % for x ≤ 0.5 (docs/notes/attention-kernels.md §1.4)
    expect(errors[4]).toBeLessThan(1e-4);
  });

  it('rejects ε ≤ 0', () => {
    expect(() => slayQuadrature(2, 0)).toThrow(/epsilon/);
  });
});
