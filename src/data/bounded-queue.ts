// A single-producer single-consumer bounded async queue: a shard producer (src/data/reader.ts) hands the consumer
// tokenized record batches through one, so reading ahead holds at most its capacity.

/** Single-producer single-consumer bounded async queue. */
export class BoundedQueue<T> {
  private readonly items: T[] = [];
  private ended = false;
  private error: unknown = null;
  private cancelled = false;
  private wakeConsumer: (() => void) | null = null;
  private wakeProducer: (() => void) | null = null;
  private drainedResolve!: () => void;
  /** Resolves when the consumer has taken the end marker (or the queue was cancelled). */
  readonly drained = new Promise<void>((resolve) => (this.drainedResolve = resolve));

  constructor(private readonly capacity: number) {}

  get isCancelled(): boolean {
    return this.cancelled;
  }

  async push(item: T): Promise<void> {
    while (this.items.length >= this.capacity && !this.cancelled) {
      await new Promise<void>((resolve) => (this.wakeProducer = resolve));
    }
    if (this.cancelled) return;
    this.items.push(item);
    this.wake('consumer');
  }

  end(error: unknown = null): void {
    this.ended = true;
    this.error = error;
    this.wake('consumer');
  }

  /** Next item; null after the producer ended. Rethrows a producer error. */
  async pull(): Promise<T | null> {
    while (this.items.length === 0 && !this.ended) {
      await new Promise<void>((resolve) => (this.wakeConsumer = resolve));
    }
    if (this.items.length > 0) {
      const item = this.items.shift()!;
      this.wake('producer');
      return item;
    }
    if (this.error !== null) throw this.error;
    this.drainedResolve();
    return null;
  }

  cancel(): void {
    this.cancelled = true;
    this.items.length = 0;
    this.wake('producer');
    this.drainedResolve();
  }

  private wake(who: 'consumer' | 'producer'): void {
    const wake = who === 'consumer' ? this.wakeConsumer : this.wakeProducer;
    if (who === 'consumer') this.wakeConsumer = null;
    else this.wakeProducer = null;
    wake?.();
  }
}
