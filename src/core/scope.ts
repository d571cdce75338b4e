// A setting switched on while a function runs (nested runs stack), for what a recording turns on around its body:
// the attention boundary (src/backend/attention-boundary.ts) and rematerialised blocks (src/model/transformer.ts).

export class Scope {
  private depth = 0;

  /** Whether some `within` is running. */
  get active(): boolean {
    return this.depth > 0;
  }

  /** Runs `fn` with the scope active. */
  within<T>(fn: () => T): T {
    this.depth++;
    try {
      return fn();
    } finally {
      this.depth--;
    }
  }
}
