// The items with the smallest random keys whose weights reach a target: a weighted bottom-k sample read in one pass.
// The evaluation's spread sample (spreadSample in stream.ts) keeps validation examples this way, weighted by their
// labelled tokens. Hand-written (a binary max-heap on the key): no dependency of the project provides a heap.

interface Entry<T> {
  key: number;
  weight: number;
  item: T;
}

/**
 * Keeps, of the items offered, the smallest set of smallest-key items whose weights sum to at least `target` (all of
 * them while the total stays below it). What it holds weighs less than the target plus one item's weight (the set without
 * its largest key weighs less than the target): memory bounded by the sample, not by what was offered.
 */
export class SmallestKeys<T> {
  private readonly heap: Entry<T>[] = [];
  private total = 0;

  constructor(private readonly target: number) {
    if (!(target > 0)) throw new Error(`SmallestKeys: the target weight must be positive, got ${target}`);
  }

  /** Offers an item with its key (uniform in [0, 1)) and its weight (≥ 0). */
  offer(key: number, weight: number, item: T): void {
    if (this.total >= this.target && key >= this.heap[0].key) return;
    this.push({ key, weight, item });
    this.total += weight;
    // Drop the largest keys while the rest still reach the target.
    while (this.heap.length > 1 && this.total - this.heap[0].weight >= this.target) this.total -= this.pop().weight;
  }

  /** The weight of the items held now. */
  get weight(): number {
    return this.total;
  }

  /** The kept items, in no particular order. */
  items(): T[] {
    return this.heap.map((e) => e.item);
  }

  private push(entry: Entry<T>): void {
    const heap = this.heap;
    heap.push(entry);
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent].key >= heap[i].key) break;
      [heap[parent], heap[i]] = [heap[i], heap[parent]];
      i = parent;
    }
  }

  private pop(): Entry<T> {
    const heap = this.heap;
    const top = heap[0];
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const [l, r] = [2 * i + 1, 2 * i + 2];
        let largest = i;
        if (l < heap.length && heap[l].key > heap[largest].key) largest = l;
        if (r < heap.length && heap[r].key > heap[largest].key) largest = r;
        if (largest === i) break;
        [heap[largest], heap[i]] = [heap[i], heap[largest]];
        i = largest;
      }
    }
    return top;
  }
}
