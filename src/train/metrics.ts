// Run folders and metric records (work in progress).
import type { Recipe } from './recipe.ts';

export interface MetricRecord {
  step: number;
  tokens: number;
  split: 'train' | 'val';
  loss: number;
  ppl: number;
  lr: number;
  grad_norm: number | null;
  tokens_per_s: number;
  elapsed_s: number;
  bpb?: number;
  epoch_fraction?: number;
}

export interface RunLoggerOptions {
  runDir?: string;
  resumeDir?: string;
}

export class RunLogger {
  readonly dir: string;
  private constructor(dir: string) {
    this.dir = dir;
  }
  static async create(recipe: Recipe, opts: RunLoggerOptions = {}): Promise<RunLogger> {
    return new RunLogger(opts.resumeDir ?? opts.runDir ?? recipe.train.runDir);
  }
  log(record: MetricRecord): void {
    void record;
  }
  line(text: string): void {
    void text;
  }
  async finish(summary: Record<string, unknown>): Promise<void> {
    void summary;
  }
}
