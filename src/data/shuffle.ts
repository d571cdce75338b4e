// Seeded bounded shuffle buffer (the tf.data / torchdata kind): hold up to `capacity` items, hand out a
// uniformly chosen one and refill its slot from the source. Its whole state is the held items, the
// RNG's four words and whether the source has ended, so it can go into a checkpoint cursor.
import { Rng } from '../core/rng.ts';
import type { RngState } from '../core/rng.ts';

export interface ShuffleState<T> {
  items: T[];
  rng: RngState;
  exhausted: boolean;
}

export class ShuffleBuffer<T> {
  private readonly items: T[];
  private readonly rng: Rng;
  private exhausted: boolean;

  constructor(
    readonly capacity: number,
    seedOrState: number | ShuffleState<T>,
  ) {
    if (!Number.isInteger(capacity) || capacity < 0) {
      throw new Error(`shuffle buffer capacity must be an integer ≥ 0, got ${capacity}`);
    }
    if (typeof seedOrState === 'number') {
      this.items = [];
      this.rng = new Rng(seedOrState);
      this.exhausted = false;
    } else {
      this.items = [...seedOrState.items];
      this.rng = new Rng(seedOrState.rng);
      this.exhausted = seedOrState.exhausted;
    }
  }

  /** Next item in shuffled order, pulling from `source` (null = source ended) as needed; null when both
   *  the source and the buffer are empty. With capacity 0 items pass straight through. */
  async next(source: () => Promise<T | null>): Promise<T | null> {
    if (this.capacity === 0) return this.exhausted ? null : this.pull(source);
    while (!this.exhausted && this.items.length < this.capacity) {
      const item = await this.pull(source);
      if (item !== null) this.items.push(item);
    }
    if (this.items.length === 0) return null;
    const slot = this.rng.int(this.items.length);
    const chosen = this.items[slot];
    const refill = this.exhausted ? null : await this.pull(source);
    if (refill !== null) {
      this.items[slot] = refill;
    } else {
      // Swap-remove keeps the draw uniform while the buffer drains.
      this.items[slot] = this.items[this.items.length - 1];
      this.items.pop();
    }
    return chosen;
  }

  state(): ShuffleState<T> {
    return { items: [...this.items], rng: this.rng.state(), exhausted: this.exhausted };
  }

  private async pull(source: () => Promise<T | null>): Promise<T | null> {
    const item = await source();
    if (item === null) this.exhausted = true;
    return item;
  }
}
