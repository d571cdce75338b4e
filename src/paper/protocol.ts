// A paper experiment as a declared, versioned protocol: the units of work it runs (one run of a run set each, see
// src/sweep/run-set.ts), the cells of the paper's tables it fills from them, the published numbers with their table,
// the rule by which ours agree with them, and the known reasons a cell may not.
import type { BackendChoice } from '../backend/device.ts';
import type { PairedResult } from '../report/paired.ts';
import type { MeanSd } from '../report/stats.ts';

/** A number as the paper prints it: mean ± sd over its seeds (sd null when it prints none), and where. */
export interface PublishedValue {
  mean: number;
  sd: number | null;
  /** The table or figure, e.g. "Table 3". */
  source: string;
}

/**
 * Why a cell may disagree, declared with the protocol: a deliberate difference of ours (documented), a gap in what
 * the paper says about its protocol, or a question nobody has answered yet.
 */
export interface Explanation {
  kind: 'deliberate' | 'protocol-gap' | 'open';
  text: string;
}

export const EXPLANATION_TITLES: Record<Explanation['kind'], string> = {
  deliberate: 'deliberate difference',
  'protocol-gap': 'protocol gap',
  open: 'open question',
};

export interface AgreementRule {
  /** The rule as printed in the results file. */
  statement: string;
  /** The largest |ours − paper| that still agrees. */
  tolerance(paper: PublishedValue, ours: MeanSd): number;
}

/** One unit of work: one run of the experiment's run set, one process. */
export interface UnitSpec {
  /** Names its run folders: letters, digits, '.', '_', '-'. */
  name: string;
  /** What the worker gets (JSON). */
  settings: Record<string, unknown>;
}

/** One cell of a results table: ours from the values of its units, beside the paper's number. */
export interface CellSpec {
  /** The results table it is in (a paper table, or a block of one), e.g. "Table 3 (Basic)". */
  table: string;
  row: string;
  column: string;
  /** null: the paper has no number here (an extra mechanism, or one it could not run). */
  published: PublishedValue | null;
  /** Applies when the cell disagrees; a disagreeing cell without one is an open question. */
  explanation?: Explanation;
  /** The units whose values make up ours (e.g. one per seed). */
  units: string[];
}

/** What a worker reports for its unit. */
export interface UnitOutcome {
  /** The metric's values (e.g. one accuracy, or one rel-ℓ2 per seed); empty when the unit could not produce one. */
  values: number[];
  /** Other numbers worth keeping (loss, latency, …), by name. */
  extra: Record<string, number | null>;
  /** Why there is no value, when there is none (e.g. "OOM: …"). */
  error?: string;
  /** Anything else the results JSON should keep (curves, the options used). */
  details?: Record<string, unknown>;
  /** One line for `status`. */
  headline: string;
}

export interface ShownExtra {
  /** The key in the units' `extra`. */
  key: string;
  /** The key holding the paper's number, if it has one. */
  paperKey?: string;
  title: string;
  digits: number;
}

/** The metric drawn against one of the units' other numbers (e.g. accuracy against state size). */
export interface PlotAgainst {
  /** The key in the units' `extra`: the x axis. */
  key: string;
  /** The x axis's title. */
  title: string;
  /** A logarithmic x axis. */
  log: boolean;
}

/**
 * A table of numbers the units measure besides the metric (e.g. evaluations of the trained models), not judged: each
 * cell the mean ± sd of one extra over a row's units (e.g. its seeds).
 */
export interface MeasureTable {
  title: string;
  /** What the numbers are, where they come from and why a cell may be empty; printed under the table. */
  note: string;
  digits: number;
  columns: { title: string; key: string }[];
  rows: { row: string; units: string[] }[];
}

export interface Experiment {
  name: string;
  /** Bumped whenever units, settings or published numbers change: runs of another version are not mixed in. */
  version: number;
  title: string;
  /** The paper and the tables or figures reproduced. */
  source: string;
  /** What is compared, in one sentence. */
  measures: string;
  metric: { name: string; digits: number };
  agreement: AgreementRule;
  /** The protocol's settings as printed in the results file (key → value in words). */
  protocol: Record<string, string>;
  /** Paragraphs printed after the tables (what the numbers mean, what is known to differ). */
  notes: string[];
  /** Paragraphs written from the units done (what their measurements show), printed after `notes`. */
  measuredNotes?(view: UnitView, quick: boolean): string[];
  /** Other numbers of the units shown as tables of their own, not judged (e.g. latency), beside the paper's where it has them. */
  shown?: ShownExtra[];
  /** Tables of other measurements of the units done (their notes may say what the units measured), after the shown extras. */
  measureTables?(view: UnitView, quick: boolean): MeasureTable[];
  /** A plot per results table of the metric against this extra, a line per row through its columns' cells. */
  plotAgainst?: PlotAgainst;
  /** The default backend of its units (the results depend on it, so it is part of where they are kept). */
  backend: BackendChoice;
  units(quick: boolean): UnitSpec[];
  cells(quick: boolean): CellSpec[];
  /**
   * Makes what every unit reads (e.g. a corpus), once, before any unit is dispatched: a missing or wrong input then
   * fails once, with its message, instead of in every unit, and parallel units (Slurm) do not race to make it.
   */
  prepare?(log: (line: string) => void): Promise<void>;
  /**
   * true when its units train through the step executors (src/train/step-executor.ts), so that a unit can run as the
   * ranks of one data-parallel run on the tensorflow backend (a Slurm unit of several tasks, docs/distributed.md).
   */
  spansRanks?: boolean;
  /**
   * Runs one unit in this process, the backend already started. In a rank other than 0 (`context.leader` false) it
   * takes part in the training and may return null: rank 0's outcome is the unit's.
   */
  runUnit(settings: Record<string, unknown>, context: UnitContext): Promise<UnitOutcome | null>;
  /** The claims the experiment tests, with verdicts from the units done so far (experiments without published tables). */
  claims?(view: UnitView, quick: boolean): Claim[];
  /** Paired differences reported without a claim to judge (e.g. every mechanism against softmax). */
  differences?(view: UnitView, quick: boolean): Difference[];
}

/** What a unit may know besides its settings: its own folder, and the units of its experiment that are done. */
export interface UnitContext {
  /** The unit's run folder (already created): a unit that trains writes its run folders inside it. */
  dir: string;
  /**
   * false in ranks 1… of a unit that runs across processes: such a rank trains with rank 0 and writes nothing (rank 0
   * alone writes the unit's folder, as the trainer's rank 0 alone writes its run folder). true in a unit of one process.
   */
  leader: boolean;
  /** Another unit's newest done folder and outcome (e.g. a pretrained model that a finetuning unit starts from); null if not done. */
  doneUnit(name: string): { dir: string; outcome: UnitOutcome } | null;
}

/** The units' numbers as the results see them. */
export interface UnitView {
  /** The unit's values (empty when it is not done or has none). */
  values(name: string): number[];
  /** One of the unit's other numbers; null when it is not done or lacks it. */
  extra(name: string, key: string): number | null;
}

/** A claim of the paper and how the units judge it. */
export interface Claim {
  statement: string;
  verdict: 'holds' | 'not separated' | 'contradicted' | 'not run';
  /** The numbers behind the verdict, in words. */
  evidence: string;
  /**
   * A claim judged by a paired test: its two-sided p against the claim's threshold (null when it has none) and the
   * side its mean lies on (+1 the claimed one). The experiment's results adjust the p for the family of tests it
   * reports and judge the verdict by the adjusted one (results.ts, correctedForFamily).
   */
  test?: { p: number | null; side: 1 | -1 };
}

/** One row against a baseline, paired over seeds: the metric's difference (row − baseline) and the shown extras'. */
export interface Difference {
  /** The results table it belongs to (e.g. "GPT (next-token)"). */
  table: string;
  row: string;
  baseline: string;
  /** Pairs with both values. */
  n: number;
  /** null when fewer than 2 pairs are done. */
  metric: PairedResult | null;
  /** metric's p adjusted for the experiment's family of tests (Holm; results.ts), once the results set it. */
  pAdjusted?: number | null;
  /** The same for each of the experiment's shown extras, by key. */
  extra: Record<string, PairedResult | null>;
}

export type Verdict = 'agrees' | 'disagrees' | 'no published value' | 'not run';

export interface CellVerdict {
  verdict: Verdict;
  /** ours − paper. */
  delta: number | null;
  tolerance: number | null;
}

/** The cell's verdict under the rule: ours (mean ± sd over its values) against the paper's number. */
export function judge(rule: AgreementRule, published: PublishedValue | null, ours: MeanSd): CellVerdict {
  if (ours.n === 0) return { verdict: 'not run', delta: null, tolerance: null };
  if (!published) return { verdict: 'no published value', delta: null, tolerance: null };
  const delta = ours.mean - published.mean;
  const tolerance = rule.tolerance(published, ours);
  return { verdict: Math.abs(delta) <= tolerance ? 'agrees' : 'disagrees', delta, tolerance };
}

/** |Δ| ≤ k·√(sd_paper² + sd_ours²) + slack, a missing sd counting as 0. */
export function sdRule(k: number, slack: number, statement: string): AgreementRule {
  return {
    statement,
    tolerance: (paper, ours) => k * Math.hypot(paper.sd ?? 0, ours.sd ?? 0) + slack,
  };
}

/** The rule of an experiment without published numbers (it tests claims instead): no cell has a value to agree with. */
export function claimsOnly(statement: string): AgreementRule {
  return { statement, tolerance: () => 0 };
}
