// `sweep plan`: every run with its planned tokens and an estimated time. The plan of a recipe (parameters, steps)
// comes from the trainer's own dry run (train/plan.ts); runs that differ only in their seed share it. The speed comes
// from the sweep's own runs that have logged one (the run itself, else its group: same settings, other seed),
// else from --tokens-per-s; without either the time is left unknown rather than guessed.
import type { RunPlan } from '../train/plan.ts';
import type { Recipe } from '../recipe/schema.ts';
import { canonicalJson } from '../core/json.ts';
import type { Sweep, SweepRun } from './spec.ts';
import { runFolders } from './run-folders.ts';
import { METRICS_FILE } from '../store/layout.ts';
import { RunFolder } from '../store/run-folder.ts';

export interface PlannedRun {
  run: SweepRun;
  parameters: number;
  steps: number | null;
  tokens: number | null;
  tokensPerSecond: number | null;
  speedSource: string;
  seconds: number | null;
  done: boolean;
}

/** A run's logged training speed: summary.json when it finished, else its last train record. */
function loggedSpeed(sweep: Sweep, run: SweepRun): number | null {
  for (const folder of runFolders(sweep, run).reverse()) {
    const run = RunFolder.at(folder.dir);
    const rate = run.summary()?.train_tokens_per_s;
    if (rate && rate > 0) return rate;
    if (!run.has(METRICS_FILE)) continue;
    // A run being trained may be writing its last line right now.
    const last = run.metrics({ cutLastLine: () => {} }).findLast((r) => r.split === 'train');
    if (last) return last.tokens_per_s;
  }
  return null;
}

export async function planSweep(sweep: Sweep, opts: { planRun: (recipe: Recipe) => Promise<RunPlan>; tokensPerSecond?: number }): Promise<PlannedRun[]> {
  const plans = new Map<string, Promise<RunPlan>>();
  const speeds = new Map(sweep.runs.map((run) => [run.name, loggedSpeed(sweep, run)]));
  const out: PlannedRun[] = [];
  for (const run of sweep.runs) {
    const { name: _name, train, ...rest } = run.recipe;
    const key = canonicalJson({ ...rest, train: { ...train, seed: 0, runDir: '' } });
    if (!plans.has(key)) plans.set(key, opts.planRun(run.recipe));
    const plan = await plans.get(key)!;
    const tokens = plan.totalSteps === null ? null : plan.totalSteps * plan.tokensPerStep;
    const own = speeds.get(run.name) ?? null;
    const sibling = sweep.runs.find((r) => r.group === run.group && speeds.get(r.name));
    const [rate, source] =
      own !== null
        ? [own, 'logged']
        : sibling
          ? [speeds.get(sibling.name)!, `from ${sibling.name}`]
          : opts.tokensPerSecond
            ? [opts.tokensPerSecond, '--tokens-per-s']
            : [null, 'unknown'];
    out.push({
      run,
      parameters: plan.parameters.total,
      steps: plan.totalSteps,
      tokens,
      tokensPerSecond: rate,
      speedSource: source,
      seconds: tokens !== null && rate !== null ? tokens / rate : null,
      done: runFolders(sweep, run).some((f) => f.done),
    });
  }
  return out;
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

function duration(seconds: number): string {
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h > 0 ? `${h}h${String(m).padStart(2, '0')}m` : `${m}m${String(s % 60).padStart(2, '0')}s`;
}

export function formatPlan(sweep: Sweep, planned: PlannedRun[]): string {
  const nameWidth = Math.max(4, ...planned.map((p) => p.run.name.length));
  const lines = [
    `sweep ${sweep.name} (${sweep.file}): ${planned.length} runs${sweep.varying.length ? `, varying ${sweep.varying.join(', ')}` : ''} → ${sweep.runDir}/<name>-<timestamp>/`,
    '',
    `${'#'.padStart(3)}  ${'name'.padEnd(nameWidth)}  ${'kind'.padEnd(4)}  ${'attention'.padEnd(13)}  ${'seed'.padStart(5)}  ${'params'.padStart(11)}  ${'steps'.padStart(7)}  ${'tokens'.padStart(13)}  ${'tok/s'.padStart(8)}  time`,
  ];
  for (const p of planned) {
    const r = p.run.recipe;
    lines.push(
      `${String(p.run.index).padStart(3)}  ${p.run.name.padEnd(nameWidth)}  ${r.model.kind.padEnd(4)}  ${r.model.attention.name.padEnd(13)}  ${String(r.train.seed).padStart(5)}  ` +
        `${fmt(p.parameters).padStart(11)}  ${(p.steps === null ? '?' : fmt(p.steps)).padStart(7)}  ${(p.tokens === null ? '?' : fmt(p.tokens)).padStart(13)}  ` +
        `${(p.tokensPerSecond === null ? '?' : fmt(p.tokensPerSecond)).padStart(8)}  ${p.seconds === null ? '?' : duration(p.seconds)}${p.done ? '  (done)' : p.speedSource === 'logged' || p.speedSource === 'unknown' ? '' : `  (speed ${p.speedSource})`}`,
    );
  }
  const tokens = planned.reduce((n, p) => n + (p.tokens ?? 0), 0);
  const timed = planned.filter((p) => p.seconds !== null && !p.done);
  const left = planned.filter((p) => !p.done);
  lines.push(
    '',
    `total ${fmt(tokens)} tokens${planned.some((p) => p.tokens === null) ? ' (some unknown: no dataset or tokenizer here)' : ''}; ${left.length} runs to go`,
  );
  if (left.length > 0) {
    lines.push(
      timed.length === left.length
        ? `estimated ${duration(timed.reduce((s, p) => s + p.seconds!, 0))} of training one after another (the local executor runs several at once when their replicas leave cores free)`
        : `time unknown for ${left.length - timed.length} runs: give --tokens-per-s, or run the sweep and plan again (speeds logged by its runs are used)`,
    );
  }
  return lines.join('\n');
}
