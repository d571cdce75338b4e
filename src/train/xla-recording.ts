// The training step's programs for the XLA route (docs/xla.md), recorded op by op on the native backend
// (backend/tf-graph.ts) exactly as the TensorFlow-function steps record them (compiled-step.ts, optimizer.ts),
// with a name for every input and output: a micro-batch's loss and gradients, the AdamW update, validation's
// sums. And each step's inputs as host arrays under the same names, which needs no TensorFlow, so a host
// without it trains from programs compiled elsewhere (`npm run compile`).
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { recordTrace, sameTrace, traceGraphDef, type Trace } from '../backend/tf-graph.ts';
import type { ArrayDtype, HostArray } from '../backend/xla/runner.ts';
import { exportPrograms, PROGRAM_CHECKSUMS, PROGRAM_FILES, programEntryProblem, type ProgramSpec, type XlaPrecision } from '../backend/xla/program-cache.ts';
import { type AttentionKernel, withAttentionBoundary } from '../backend/attention-boundary.ts';
import { withComposedKernels } from '../backend/fused-kernels.ts';
import { isRecord, readJsonFile } from '../core/json.ts';
import { dropoutSeedTensor } from '../model/layers.ts';
import type { LossInputs, ModelBatch, StepModel } from '../model/lm.ts';
import { withRematerialisedBlocks } from '../model/transformer.ts';
import { LOSS_INPUT_FIELDS, ROW_BUCKET, shapesKey, stepKey } from './compiled-step.ts';
import { positionBucketEdges, positionBucketsOf } from './evaluate.ts';
import type { AdamW } from './optimizer.ts';

export type NamedArrays = Array<[string, HostArray]>;

/**
 * Runs `fn` in a tf.tidy and returns its value, which holds no tensor: passed out by closure, since tidy walks
 * whatever it returns key by key (slow over a GraphDef's bytes).
 */
function tidyValue<T>(fn: () => T): T {
  let value: T | undefined;
  tf.tidy(() => {
    value = fn();
  });
  return value as T;
}

export function hostArray(t: tf.Tensor): HostArray {
  const dtype = t.dtype as ArrayDtype;
  if (dtype !== 'float32' && dtype !== 'int32' && dtype !== 'bool') throw new Error(`xla: a ${t.dtype} tensor cannot be sent`);
  const values = t.dataSync();
  const data =
    dtype === 'bool'
      ? Uint8Array.from(values as Uint8Array)
      : dtype === 'int32'
        ? Int32Array.from(values as Int32Array)
        : Float32Array.from(values as Float32Array);
  return { dtype, shape: [...t.shape], data };
}

/** The model's tensors every program reads, by input name (parameters, then buffers). */
export function modelTensors(model: StepModel): Array<[string, tf.Tensor]> {
  return [
    ...[...model.parameters()].map(([n, v]) => [`param:${n}`, v] as [string, tf.Tensor]),
    ...[...model.buffers()].map(([n, v]) => [`buffer:${n}`, v] as [string, tf.Tensor]),
  ];
}

/** The batch tensors of a micro-batch's program, by input name (the loss inputs, the dropout seed, the divisor). */
function batchTensors(inputs: LossInputs, seed: number | null, total: number | null): Array<[string, tf.Tensor]> {
  return [
    ...LOSS_INPUT_FIELDS.flatMap((f) => (inputs[f] ? [[`batch:${f}`, inputs[f]!] as [string, tf.Tensor]] : [])),
    ...(seed !== null ? [['batch:seed', dropoutSeedTensor(seed)] as [string, tf.Tensor]] : []),
    ...(total !== null ? [['batch:divisor', tf.scalar(total)] as [string, tf.Tensor]] : []),
  ];
}

/**
 * A micro-batch's inputs as host arrays and the key of the program that takes them (the same key as the
 * TensorFlow-function step's: shapes, trained parameters, dropout), or null when it labels nothing.
 */
export function gradientInputs(
  model: StepModel,
  batch: ModelBatch,
  variables: tf.Variable[],
  seed: number | null,
  total: number,
): { key: string; arrays: NamedArrays } | null {
  return tidyValue(() => {
    const inputs = model.lossInputs(batch, ROW_BUCKET);
    if (!inputs) return null;
    const dropout = seed !== null && model.dropout > 0;
    return {
      key: stepKey(inputs, variables, dropout),
      arrays: batchTensors(inputs, dropout ? seed : null, total).map(([n, t]) => [n, hostArray(t)] as [string, HostArray]),
    };
  });
}

/**
 * Validation's position buckets of a batch (positionBucketEdges of its own length; evaluate.ts): `batch:positions`,
 * each flat position's bucket, and how many buckets the program sums into.
 */
function evalPositions(batch: ModelBatch): { bucketOf: Int32Array; count: number } {
  const edges = positionBucketEdges(batch.seqLen);
  return { bucketOf: positionBucketsOf(batch, edges), count: edges.length - 1 };
}

/** A validation batch's inputs (with batch:positions) and its program's key, with its labelled count (null: nothing labelled). */
export function evalInputs(model: StepModel, batch: ModelBatch): { key: string; arrays: NamedArrays; count: number } | null {
  return tidyValue(() => {
    const inputs = model.lossInputs(batch, ROW_BUCKET);
    if (!inputs) return null;
    const { bucketOf } = evalPositions(batch);
    return {
      key: `eval|${shapesKey(inputs)}`,
      arrays: [
        ...batchTensors(inputs, null, null).map(([n, t]) => [n, hostArray(t)] as [string, HostArray]),
        ['batch:positions', { dtype: 'int32', shape: [bucketOf.length], data: bucketOf }],
      ],
      count: inputs.count,
    };
  });
}

/**
 * Records `run` over the named feeds until two recordings agree (as GraphCache does: the first often differs,
 * constant caches fill on first use) and returns it as a program spec with the given output names.
 */
function recordProgram(feeds: Array<[string, tf.Tensor]>, outputs: (produced: tf.Tensor[]) => string[], run: () => tf.Tensor[], what: string): ProgramSpec {
  let previous: Trace | null = null;
  for (let attempt = 0; attempt < 3; attempt++) {
    let names: string[] = [];
    const trace = tidyValue(() => {
      // XLA cannot compile the fused CPU kernels (backend/fused-kernels.ts): the program is recorded in its composed form.
      const recorded = withComposedKernels(() =>
        recordTrace(
          feeds.map(([, t]) => t),
          run,
        ),
      );
      names = outputs(recorded.outputs);
      return recorded.trace;
    });
    if (trace.unfollowable) throw new Error(`xla: the ${what} cannot be recorded: ${trace.unfollowable}`);
    if (previous && sameTrace(previous, trace)) {
      const { graphDef, feedNames, fetchNames } = traceGraphDef(trace);
      return {
        graphDef,
        fetches: fetchNames,
        inputs: feeds.map(([n]) => n),
        outputs: names,
        feeds: trace.feeds.map((f, i) => ({ name: feedNames[i], dtype: f.dtype as ArrayDtype, shape: f.shape })),
      };
    }
    previous = trace;
  }
  throw new Error(`xla: the ${what}'s recordings differed in their programs or constants`);
}

/** A micro-batch's loss and gradients as a program (outputs loss, grad:<name> of each parameter a path reaches). */
export function recordGradientProgram(model: StepModel, batch: ModelBatch, variables: tf.Variable[], seed: number | null, total: number): ProgramSpec {
  return tidyValue(() => {
    const inputs = model.lossInputs(batch, ROW_BUCKET);
    if (!inputs) throw new Error('xla: a batch with no labelled position has no program');
    const dropout = seed !== null && model.dropout > 0;
    const feeds = [...batchTensors(inputs, dropout ? seed : null, total), ...modelTensors(model)];
    const seedTensor = feeds.find(([n]) => n === 'batch:seed')?.[1] as tf.Tensor1D | undefined;
    const divisor = feeds.find(([n]) => n === 'batch:divisor')![1];
    let gradNames: string[] = [];
    const run = () => {
      const out = tf.variableGrads(() => tf.div(model.lossOf(inputs, seedTensor ?? null), divisor) as tf.Scalar, variables);
      gradNames = Object.keys(out.grads);
      return [out.value, ...gradNames.map((n) => out.grads[n])];
    };
    return recordProgram(feeds, () => ['loss', ...gradNames.map((n) => `grad:${n}`)], run, 'gradient step');
  });
}

/**
 * Validation's sums of a batch as a program (outputs sum:loss, sum:correct and sum:byPosition, Σ cross-entropy per
 * position bucket of batch:positions). Programs compiled before sum:byPosition existed lack it and ignore that input.
 */
export function recordEvalProgram(model: StepModel, batch: ModelBatch): ProgramSpec {
  return tidyValue(() => {
    const inputs = model.lossInputs(batch, ROW_BUCKET);
    if (!inputs) throw new Error('xla: a batch with no labelled position has no program');
    const { bucketOf, count } = evalPositions(batch);
    const positions = tf.tensor1d(bucketOf, 'int32');
    const feeds: Array<[string, tf.Tensor]> = [...batchTensors(inputs, null, null), ['batch:positions', positions], ...modelTensors(model)];
    const run = () => {
      const sums = model.evalSumsOf(inputs, { bucketOf: positions, count });
      return [sums.loss, sums.correct, sums.byPosition!];
    };
    return recordProgram(feeds, () => ['sum:loss', 'sum:correct', 'sum:byPosition'], run, 'validation');
  });
}

/**
 * AdamW's update over gradients named `gradNames` as a program whose new state is guarded by the non-finite
 * rule (export.py): inputs as AdamW.updateProgram names them plus the summed loss; outputs norm, opt:m, opt:v,
 * param:<updated>, applied. `fixed`: the inputs that are neither state nor per-step (opt:present).
 */
export function recordApplyProgram(optimizer: AdamW, model: StepModel, gradNames: readonly string[], clip: number): { spec: ProgramSpec; fixed: NamedArrays } {
  return tidyValue(() => {
    const params = model.parameters();
    const grads = new Map(gradNames.map((n) => [n, tf.zeros(params.get(n)!.shape)] as [string, tf.Tensor]));
    const program = optimizer.updateProgram(grads, clip, optimizer.stepScalars(1e-3, clip, 1));
    const spec = recordProgram(program.inputs, () => program.outputs, program.run, 'AdamW update');
    const fixed = program.inputs.filter(([n]) => n === 'opt:present').map(([n, t]) => [n, hostArray(t)] as [string, HostArray]);
    return { spec: { ...spec, extraInputs: [{ name: 'loss', dtype: 'float32', shape: [] }], guard: { finite: ['norm', 'loss'] } }, fixed };
  });
}

/** A program ready to load: its files (`base` + .vhlo/.mlir/.json), output names, and fixed inputs. */
export interface BookEntry {
  base: string;
  outputs: string[];
  fixed: NamedArrays;
}

export type ProgramKind = 'gradient' | 'apply' | 'eval';

/** Where the executor's programs come from: recorded and exported here, or compiled ahead of time (a folder). */
export interface ProgramBook {
  /** The program of `kind` under `key`; `record` makes its spec where this book records (else unused). */
  get(kind: ProgramKind, key: string, record: () => { spec: ProgramSpec; fixed?: NamedArrays }): BookEntry;
  /** What the step ran, for the first step's log line. */
  readonly origin: string;
}

/** The output names in a program's .json; a broken file is an error naming it. */
function outputsOf(base: string): string[] {
  const file = `${base}.json`;
  const meta = readJsonFile(file);
  const outputs = isRecord(meta) ? meta.outputs : undefined;
  if (!Array.isArray(outputs) || !outputs.every((o) => typeof o === 'string')) throw new Error(`${file}: no list of output names ("outputs")`);
  return outputs;
}

/** How a book's programs are recorded: the plan's precision, attention kernel and rematerialisation (docs/xla.md). */
export interface RecordingSettings {
  precision?: XlaPrecision;
  attentionKernel?: AttentionKernel;
  remat?: boolean;
}

/**
 * Records each program on first use on the native backend and exports it through the content cache (src/backend/xla/program-cache.ts).
 * `precision` applies to the gradient and validation programs; AdamW's update stays float32 (docs/xla.md).
 * `attentionKernel` fused records their softmax attention as the boundary jax fills in (docs/xla.md, "Attention on the GPU");
 * the GraphDef, and so the cache's key, then differs from the composed one's. `remat` (train.remat) records the
 * gradient programs with rematerialised transformer blocks (docs/xla.md, "Rematerialisation").
 */
export class RecordingBook implements ProgramBook {
  readonly origin = 'recorded here and exported through TensorFlow (cached by content)';
  /** Every program handed out, by kind and key: what `npm run compile` writes. */
  readonly entries = new Map<string, BookEntry & { kind: ProgramKind; key: string }>();

  readonly precision: XlaPrecision;
  readonly attentionKernel: AttentionKernel;
  readonly remat: boolean;

  constructor(
    settings: RecordingSettings = {},
    private readonly cache?: string,
  ) {
    this.precision = settings.precision ?? 'fp32';
    this.attentionKernel = settings.attentionKernel ?? 'composed';
    this.remat = settings.remat ?? false;
  }

  get(kind: ProgramKind, key: string, record: () => { spec: ProgramSpec; fixed?: NamedArrays }): BookEntry {
    const known = this.entries.get(`${kind}|${key}`);
    if (known) return known;
    const remat = kind === 'gradient' && this.remat;
    const rematerialised = remat ? () => withRematerialisedBlocks(record) : record;
    const { spec, fixed = [] } = this.attentionKernel === 'fused' && kind !== 'apply' ? withAttentionBoundary(rematerialised) : rematerialised();
    const [exported] = exportPrograms([kind === 'apply' ? spec : { ...spec, precision: this.precision, ...(remat ? { remat } : {}) }], this.cache);
    const entry = { base: exported.base, outputs: outputsOf(exported.base), fixed, kind, key };
    this.entries.set(`${kind}|${key}`, entry);
    return entry;
  }
}

/** The manifest `npm run compile` writes beside the programs (docs/xla.md, "Ahead of time"). */
export interface ProgramManifest {
  format: 1;
  recipe: string;
  /** train.precision the programs were exported for; absent (folders from before it) = fp32. */
  precision?: XlaPrecision;
  /** train.attentionKernel they were recorded with (their files say it too: the boundary is in them); absent = composed. */
  attentionKernel?: AttentionKernel;
  /** train.remat the gradient programs were recorded with; absent = false. */
  remat?: boolean;
  /** Every model tensor the programs read, with its shape: checked against the model before training. */
  tensors: Array<[string, number[]]>;
  programs: Array<{ kind: ProgramKind; key: string; file: string; fixed: Array<{ name: string; dtype: ArrayDtype; shape: number[]; file: string }> }>;
}

export const MANIFEST_FILE = 'manifest.json';

/** Programs compiled ahead of time into `dir` (manifest.json); a key it lacks is an error naming the shape. */
export class CompiledBook implements ProgramBook {
  readonly origin: string;
  private readonly byKey = new Map<string, BookEntry>();

  constructor(
    readonly dir: string,
    model: StepModel,
    { precision = 'fp32', attentionKernel = 'composed', remat = false }: RecordingSettings = {},
  ) {
    const file = path.join(dir, MANIFEST_FILE);
    if (!fs.existsSync(file)) throw new Error(`xla: ${file} not found (npm run compile -- <recipe> --out ${dir} writes it)`);
    const manifest = JSON.parse(fs.readFileSync(file, 'utf8')) as ProgramManifest;
    if (manifest.format !== 1 || !Array.isArray(manifest.programs) || !Array.isArray(manifest.tensors))
      throw new Error(`xla: ${file} is not a program manifest of format 1`);
    const compiledFor = manifest.precision ?? 'fp32';
    if (compiledFor !== precision)
      throw new Error(
        `xla: ${file} was compiled for train.precision ${compiledFor}, this run asks ${precision} (npm run compile -- <recipe> --train.executor=xla --train.precision=${precision} --out <folder> writes programs for it)`,
      );
    const recordedWith = manifest.attentionKernel ?? 'composed';
    if (recordedWith !== attentionKernel)
      throw new Error(
        `xla: ${file} was compiled for train.attentionKernel ${recordedWith}, this run asks ${attentionKernel} (npm run compile -- <recipe> --train.executor=xla --train.attentionKernel=${attentionKernel} --out <folder> writes programs for it)`,
      );
    if ((manifest.remat ?? false) !== remat)
      throw new Error(
        `xla: ${file} was compiled with train.remat ${manifest.remat ?? false}, this run asks ${remat} (npm run compile -- <recipe> --train.executor=xla --train.remat=${remat} --out <folder> writes programs for it)`,
      );
    const have = new Map(modelTensors(model).map(([n, t]) => [n, t.shape]));
    for (const [name, shape] of manifest.tensors) {
      const mine = have.get(name);
      if (!mine || !tf.util.arraysEqual(mine, shape))
        throw new Error(`xla: ${file} was compiled for tensor ${name} [${shape}], this model has ${mine ? `[${mine}]` : 'none'}`);
    }
    if (have.size !== manifest.tensors.length)
      throw new Error(`xla: ${file} was compiled for ${manifest.tensors.length} model tensors, this model has ${have.size}`);
    for (const p of manifest.programs) {
      const base = path.join(dir, p.file);
      if (path.dirname(path.resolve(base)) !== path.resolve(dir)) throw new Error(`xla: ${file}: program file '${p.file}' is outside the folder`);
      const problem = programEntryProblem(base);
      if (problem) throw new Error(`xla: ${problem} (npm run compile writes the folder again)`);
      const fixed = p.fixed.map((f): [string, HostArray] => {
        const bytes = fs.readFileSync(path.join(dir, path.basename(f.file)));
        const count = f.shape.reduce((a, b) => a * b, 1);
        const data =
          f.dtype === 'bool'
            ? new Uint8Array(bytes)
            : f.dtype === 'int32'
              ? new Int32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4)
              : new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
        if (data.length !== count) throw new Error(`xla: ${f.file} holds ${data.length} values, the manifest says [${f.shape}]`);
        return [f.name, { dtype: f.dtype, shape: f.shape, data }];
      });
      this.byKey.set(`${p.kind}|${p.key}`, { base, outputs: outputsOf(base), fixed });
    }
    this.origin = `compiled ahead of time for recipe ${manifest.recipe} (${dir})`;
  }

  get(kind: ProgramKind, key: string): BookEntry {
    const entry = this.byKey.get(`${kind}|${key}`);
    if (!entry)
      throw new Error(
        `xla: ${this.dir} has no ${kind} program for ${key.split('|')[0]} (npm run compile covers the recipe's batch shapes; other shapes need recompiling)`,
      );
    return entry;
  }
}

/** Copies the programs `book` handed out into `dir` with a manifest: what a host without TensorFlow trains from. */
export function writeCompiledPrograms(book: RecordingBook, dir: string, recipe: string, model: StepModel): ProgramManifest {
  fs.mkdirSync(dir, { recursive: true });
  const programs: ProgramManifest['programs'] = [];
  for (const entry of book.entries.values()) {
    const file = path.basename(entry.base);
    for (const ext of [...PROGRAM_FILES, PROGRAM_CHECKSUMS]) fs.copyFileSync(entry.base + ext, path.join(dir, file + ext));
    const fixed = entry.fixed.map(([name, a], i) => {
      const bin = `${file}.fixed${i}.bin`;
      fs.writeFileSync(path.join(dir, bin), new Uint8Array(a.data.buffer, a.data.byteOffset, a.data.byteLength));
      return { name, dtype: a.dtype, shape: a.shape, file: bin };
    });
    programs.push({ kind: entry.kind, key: entry.key, file, fixed });
  }
  const manifest: ProgramManifest = {
    format: 1,
    recipe,
    precision: book.precision,
    attentionKernel: book.attentionKernel,
    ...(book.remat ? { remat: true } : {}),
    tensors: modelTensors(model).map(([n, t]) => [n, [...t.shape]]),
    programs,
  };
  fs.writeFileSync(path.join(dir, MANIFEST_FILE), JSON.stringify(manifest, null, 1) + '\n');
  return manifest;
}
