// A small seeded random generator whose whole state is four 32-bit words, so it can be saved in a
// checkpoint and restored exactly. Written by hand (xoshiro128** seeded through splitmix32)
// because tfjs's seeded ops keep no inspectable state and the npm alternatives add nothing we use.

export type RngState = [number, number, number, number];

function splitmix32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

/** Hashes a seed and a label into a new 32-bit seed (for independent named sub-streams). */
export function deriveSeed(seed: number, label: string | number): number {
  let h = (seed ^ 0x811c9dc5) >>> 0;
  for (const ch of String(label)) h = Math.imul(h ^ ch.charCodeAt(0), 0x01000193) >>> 0;
  return splitmix32(h)();
}

export class Rng {
  private s: RngState;

  constructor(seed: number | RngState) {
    if (Array.isArray(seed)) {
      this.s = [...seed] as RngState;
    } else {
      const next = splitmix32(seed);
      this.s = [next(), next(), next(), next()];
    }
  }

  state(): RngState {
    return [...this.s] as RngState;
  }

  /** Uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const s = this.s;
    const result = Math.imul(rotl(Math.imul(s[1], 5) >>> 0, 7), 9) >>> 0;
    const t = (s[1] << 9) >>> 0;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    for (let i = 0; i < 4; i++) s[i] >>>= 0;
    return result;
  }

  /** Uniform in [0, 1) with 53 random bits. */
  uniform(): number {
    const hi = this.nextUint32() >>> 5;
    const lo = this.nextUint32() >>> 6;
    return (hi * 67108864 + lo) / 9007199254740992;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.uniform() * n);
  }

  /** Standard normal (Box–Muller). */
  normal(): number {
    let u = this.uniform();
    while (u <= 0) u = this.uniform();
    return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * this.uniform());
  }

  normalArray(n: number): Float64Array {
    const out = new Float64Array(n);
    for (let i = 0; i < n; i++) out[i] = this.normal();
    return out;
  }

  /** ±1 with equal probability. */
  rademacher(): number {
    return this.nextUint32() & 1 ? 1 : -1;
  }

  /** In-place Fisher–Yates shuffle. */
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(i + 1);
      [items[i], items[j]] = [items[j], items[i]];
    }
    return items;
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}
