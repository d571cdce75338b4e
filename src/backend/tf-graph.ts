// Graph execution on the native tensorflow backend. tfjs runs every op eagerly: on tfjs-node each
// op is a TFE_Execute through the binding plus the engine's bookkeeping, ~25–45 µs before any work,
// and a training step of the bench GPT is ~1,000 ops (`npm run bench:train -- --profile`). Here a
// computation is recorded once, op by op, as the binding executes it, written out as a TensorFlow
// GraphDef and registered in the binding's eager context as a TensorFlow function (what tf.function
// does in eager mode; native/tfjs_functions.cc, added to the binding by the set-up), so that later
// calls are one op: no JavaScript runs per op, TF's executor runs independent ops side by side, and
// the call names the backend's device (GPU:0 where there is one), whose tensors never leave it —
// inputs and outputs are tensor handles on the device (docs/graph-functions.md). With `xla` the call
// asks TensorFlow to compile the function with XLA.
//
// What a graph may depend on is explicit: the feeds (tensors given at each call, matched by tensor
// identity while recording) are function inputs; everything else the ops read — values uploaded from
// JavaScript while recording, tensors that existed before — is frozen into the graph as constants.
// A graph is only built once two calls under the same key recorded the same program with the same
// constants (GraphCache), so values that change from call to call (dropout masks drawn in JS, a
// loss divisor, a redrawn projection that is not a feed) keep that key on eager execution.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { withComposedKernels } from './fused-kernels.ts';

/** One attribute as the binding takes it (tfjs-node's opAttrs). */
interface OpAttr {
  name: string;
  type: number;
  value: unknown;
}

/** Where an op input comes from: another op's output, a feed, or a frozen value. */
type Source = { kind: 'op'; op: number; index: number } | { kind: 'feed'; index: number } | { kind: 'const'; value: number };

interface RecordedOp {
  op: string;
  attrs: OpAttr[];
  inputs: Source[];
}

interface FrozenValue {
  dtype: number;
  shape: number[];
  bytes: Uint8Array;
}

/** A recorded program: ops in execution order, frozen values, and where each result comes from. */
export interface Trace {
  ops: RecordedOp[];
  constants: FrozenValue[];
  outputs: Source[];
  feeds: Array<{ dtype: tf.DataType; shape: number[] }>;
  /** Why the recording cannot be a graph, if it cannot. */
  unfollowable?: string;
}

/** The parts of tfjs-node's backend and binding this module uses. */
interface NativeBinding {
  executeOp(op: string, attrs: OpAttr[], inputs: number[], outputs: number): Array<{ id: number; shape: number[]; dtype: number }>;
  createTensor(shape: number[], dtype: number, values: ArrayBufferView): number;
  tensorDataSync(id: number): ArrayBufferView;
  /** Added by the set-up (native/tfjs_functions.cc). */
  registerFunction?(name: string, graphDef: Uint8Array, inputs: string[], outputs: string[]): void;
  callFunction(name: string, inputs: number[], outputs: number, xla: boolean): Array<{ id: number; shape: number[]; dtype: number }>;
  removeFunction(name: string): void;
  hasFunction(name: string): boolean;
  deviceName(): string;
  TF_ATTR_STRING: number;
  TF_ATTR_INT: number;
  TF_ATTR_FLOAT: number;
  TF_ATTR_BOOL: number;
  TF_ATTR_TYPE: number;
  TF_ATTR_SHAPE: number;
  TF_FLOAT: number;
  TF_INT32: number;
  TF_BOOL: number;
}

interface NativeBackend {
  binding: NativeBinding;
  isUsingGpuDevice?: boolean;
  tensorMap: { get(dataId: object): { id: number } | undefined };
  getInputTensorIds(tensors: tf.TensorInfo[]): number[];
  createOutputTensor(metadata: { id: number; shape: number[]; dtype: number }): tf.Tensor;
}

const nativeBackend = () => tf.backend() as unknown as NativeBackend;

/**
 * Whether graphs can run here: the tensorflow backend, with a binding that has TensorFlow functions
 * (every build of `npm run setup:tensorflow`; an installed stock tfjs-node has none). Any device.
 */
export function graphsAvailable(): boolean {
  return tf.getBackend() === 'tensorflow' && typeof nativeBackend().binding?.registerFunction === 'function';
}

/** The device graph functions and ops run on, e.g. /job:localhost/replica:0/task:0/device:GPU:0. */
export function graphDevice(): string {
  return graphsAvailable() ? nativeBackend().binding.deviceName() : tf.getBackend();
}

const bytesOf = (v: ArrayBufferView) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength).slice();

type OneOpRecorder = (op: string, attrs: OpAttr[], inputs: tf.Tensor[], compute: () => tf.Tensor[]) => tf.Tensor[];

/** The recording in progress (recordTrace), if any. */
let oneOpRecorder: OneOpRecorder | null = null;

/**
 * Runs `fn` eagerly and records every op it executes. `feeds` are the tensors that become graph
 * inputs; `fn` returns the tensors that become graph outputs.
 */
export function recordTrace(feeds: readonly tf.Tensor[], fn: () => tf.Tensor[]): { outputs: tf.Tensor[]; trace: Trace } {
  const backend = nativeBackend();
  const binding = backend.binding;
  const feedIndex = new Map<object, number>(feeds.map((t, i) => [t.dataId, i]));
  const sources = new Map<number, Source>(); // binding tensor id → source
  const constants: FrozenValue[] = [];
  const ops: RecordedOp[] = [];
  const freeze = (value: FrozenValue): Source => {
    constants.push(value);
    return { kind: 'const', value: constants.length - 1 };
  };
  const uploads = new Map<number, FrozenValue>();
  // A program the recorder could not follow is still run (eagerly) to the end, then refused.
  let unknown: string | undefined;
  const sourceOf = (id: number, tensor: tf.TensorInfo): Source => {
    const known = sources.get(id);
    if (known) return known;
    const feed = feedIndex.get(tensor.dataId);
    // A feed's handle may first be created here (tfjs-node uploads lazily): it is still the feed.
    const frozen = () => {
      if (!(tensor.dtype in DTYPES)) unknown ??= `a ${tensor.dtype} tensor from before the recording`;
      return {
        dtype: dtypeEnum(binding, DTYPES[tensor.dtype] ? tensor.dtype : 'float32'),
        shape: [...tensor.shape],
        bytes: bytesOf(binding.tensorDataSync(id)),
      };
    };
    const source = feed !== undefined ? ({ kind: 'feed', index: feed } as const) : freeze(uploads.get(id) ?? frozen());
    sources.set(id, source);
    return source;
  };
  // The binding's own properties are read-only: the backend is given a recording view of it.
  const recorder = Object.create(binding) as NativeBinding;
  recorders.add(recorder);
  Object.defineProperties(recorder, {
    createTensor: {
      value: (shape: number[], dtype: number, values: ArrayBufferView) => {
        const id = binding.createTensor(shape, dtype, values);
        uploads.set(id, { dtype, shape: [...shape], bytes: bytesOf(values) });
        return id;
      },
    },
    executeOp: {
      value: (op: string, attrs: OpAttr[], inputIds: number[], count: number) => {
        // The binding cannot pass the barrier's list(type) attribute: its values run as Identity, the graph gets the barrier.
        const results =
          op === XLA_BARRIER_OP
            ? inputIds.map(
                (id, i) => binding.executeOp('Identity', [{ name: 'T', type: binding.TF_ATTR_TYPE, value: (attrs[0].value as number[])[i] }], [id], 1)[0],
              )
            : binding.executeOp(op, attrs, inputIds, count);
        const inputs = inputIds.map((id) => {
          const source = sources.get(id) ?? (uploads.has(id) ? freeze(uploads.get(id)!) : undefined);
          if (!source) unknown ??= `input ${id} of ${op} came from outside the recording`;
          return source ?? ({ kind: 'const', value: -1 } as const);
        });
        ops.push({ op, attrs: attrs.map((a) => ({ ...a })), inputs });
        results.forEach((r, index) => sources.set(r.id, { kind: 'op', op: ops.length - 1, index }));
        return results;
      },
    },
  });
  const getInputTensorIds = backend.getInputTensorIds;
  const recordingInputIds = function (this: NativeBackend, tensors: tf.TensorInfo[]) {
    const ids = getInputTensorIds.call(this, tensors);
    ids.forEach((id, i) => sourceOf(id, tensors[i]));
    return ids;
  };
  const asOneOp: OneOpRecorder = (op, attrs, inputs, compute) => {
    const inputSources = backend.getInputTensorIds(inputs).map((id) => sources.get(id)!);
    // compute's own ops run unrecorded: the program gets the one op in their place.
    backend.binding = binding;
    backend.getInputTensorIds = getInputTensorIds;
    let outputs: tf.Tensor[];
    try {
      outputs = compute();
    } finally {
      backend.binding = recorder;
      backend.getInputTensorIds = recordingInputIds;
    }
    ops.push({ op, attrs: attrs.map((a) => ({ ...a })), inputs: inputSources });
    outputs.forEach((t, index) => sources.set(getInputTensorIds.call(backend, [t])[0], { kind: 'op', op: ops.length - 1, index }));
    return outputs;
  };
  const outerOneOp = oneOpRecorder;
  backend.binding = recorder;
  backend.getInputTensorIds = recordingInputIds;
  oneOpRecorder = asOneOp;
  try {
    const outputs = fn();
    const outputSources = outputs.map((t) => sourceOf(handleId(backend, t), t));
    return {
      outputs,
      trace: { ops, constants, outputs: outputSources, feeds: feeds.map((t) => ({ dtype: t.dtype, shape: [...t.shape] })), unfollowable: unknown },
    };
  } finally {
    backend.binding = binding;
    backend.getInputTensorIds = getInputTensorIds;
    oneOpRecorder = outerOneOp;
  }
}

/** A value of an attribute of an op recorded by recordedAsOneOp. */
export type GraphAttr =
  | { name: string; kind: 'int'; value: number }
  | { name: string; kind: 'string'; value: string | string[] }
  | { name: string; kind: 'type'; value: tf.DataType | tf.DataType[] }
  | { name: string; kind: 'shapes'; value: number[][] };

/**
 * `compute()`, whose ops a recording in progress takes as ONE op `op` (with `attrs`) of `inputs`, its outputs
 * compute's: for an op that stands, in the program, for what compute does eagerly (e.g. an XlaCallModule a later
 * stage implements: docs/xla.md, "Attention on the GPU"). Outside a recording it is compute().
 */
export function recordedAsOneOp(op: string, attrs: readonly GraphAttr[], inputs: tf.Tensor[], compute: () => tf.Tensor[]): tf.Tensor[] {
  if (!oneOpRecorder) return compute();
  const binding = nativeBackend().binding;
  const types: Record<GraphAttr['kind'], number> = {
    int: binding.TF_ATTR_INT,
    string: binding.TF_ATTR_STRING,
    type: binding.TF_ATTR_TYPE,
    shapes: binding.TF_ATTR_SHAPE,
  };
  const valueOf = (a: GraphAttr) =>
    a.kind === 'type' ? (Array.isArray(a.value) ? a.value.map((d) => dtypeEnum(binding, d)) : dtypeEnum(binding, a.value)) : a.value;
  return oneOpRecorder(
    op,
    attrs.map((a) => ({ name: a.name, type: types[a.kind], value: valueOf(a) })),
    inputs,
    compute,
  );
}

/** The recording views of the binding recordTrace has made (the barrier kernel records only through one). */
const recorders = new WeakSet<object>();

/** TensorFlow's op whose tf2xla lowering is stablehlo.optimization_barrier. */
const XLA_BARRIER_OP = 'XlaOptimizationBarrier';

/** The tfjs kernel of optimizationBarrier on the tensorflow backend (registerOptimizationBarrier). */
export const OPTIMIZATION_BARRIER = 'SlayformerOptimizationBarrier';

/**
 * The tensors unchanged, and in a recording one XlaOptimizationBarrier over all of them: XLA computes nothing that
 * uses a result before every input is ready, and merges no computation on a result with one on its input (docs/xla.md,
 * "Rematerialisation"). Only a recording for export carries it: the binding cannot execute the op (its list(type)
 * attribute), so eagerly, and on other backends, the values pass as they are.
 */
export function optimizationBarrier(tensors: tf.Tensor[]): tf.Tensor[] {
  if (!tf.getKernel(OPTIMIZATION_BARRIER, tf.getBackend())) return tensors;
  const inputs = Object.fromEntries(tensors.map((t, i) => [`x${i}`, t]));
  return tf.engine().runKernel(OPTIMIZATION_BARRIER, inputs) as unknown as tf.Tensor[];
}

/** Registers optimizationBarrier's kernel on the tensorflow backend (backend/tensorflow.ts, at load). */
export function registerOptimizationBarrier(): void {
  tf.registerKernel({
    kernelName: OPTIMIZATION_BARRIER,
    backendName: 'tensorflow',
    kernelFunc: ({ inputs, backend }) => {
      const native = backend as unknown as NativeBackend & {
        executeMultipleOutputs(op: string, attrs: OpAttr[], inputs: tf.TensorInfo[], outputs: number): tf.TensorInfo[];
      };
      const { binding } = native;
      const tensors = Object.values(inputs) as tf.TensorInfo[];
      const types = tensors.map((t) => dtypeEnum(binding, t.dtype));
      if (recorders.has(binding))
        return native.executeMultipleOutputs(XLA_BARRIER_OP, [{ name: 'T', type: binding.TF_ATTR_TYPE, value: types }], tensors, tensors.length);
      return tensors.map((t, i) => native.executeMultipleOutputs('Identity', [{ name: 'T', type: binding.TF_ATTR_TYPE, value: types[i] }], [t], 1)[0]);
    },
  });
}

function handleId(backend: NativeBackend, t: tf.Tensor): number {
  return backend.getInputTensorIds([t])[0];
}

/** The dtypes a graph feed or frozen tensor may have, by their binding enum name. */
const DTYPES: Record<string, 'TF_FLOAT' | 'TF_INT32' | 'TF_BOOL'> = { float32: 'TF_FLOAT', int32: 'TF_INT32', bool: 'TF_BOOL' };

function dtypeEnum(binding: NativeBinding, dtype: tf.DataType): number {
  const name = DTYPES[dtype];
  if (!name) throw new Error(`graph: dtype ${dtype} is not supported`);
  return binding[name];
}

/** Whether two traces are the same program with the same constants. */
export function sameTrace(a: Trace, b: Trace): boolean {
  if (a.ops.length !== b.ops.length || a.constants.length !== b.constants.length) return false;
  if (JSON.stringify([a.ops, a.outputs, a.feeds]) !== JSON.stringify([b.ops, b.outputs, b.feeds])) return false;
  return a.constants.every((c, i) => {
    const d = b.constants[i];
    return c.dtype === d.dtype && tf.util.arraysEqual(c.shape, d.shape) && Buffer.compare(c.bytes, d.bytes) === 0;
  });
}

let functionCount = 0;

/** A recorded trace registered as a TensorFlow function: call run() with tensors shaped as its feeds. */
export class CompiledGraph {
  private constructor(
    readonly name: string,
    private readonly outputCount: number,
    private readonly feedShapes: Trace['feeds'],
  ) {}

  /** Registers `trace` as a function of the backend's eager context (under a fresh name). */
  static load(trace: Trace): CompiledGraph {
    const binding = nativeBackend().binding;
    if (!binding.registerFunction) throw new Error('graph: this tensorflow binding has no TensorFlow functions (run `npm run setup:tensorflow` again)');
    const { graphDef, feedNames, fetchNames } = buildGraphDef(trace, binding);
    const name = `slayformer_step_${process.pid}_${++functionCount}`;
    binding.registerFunction(name, graphDef, feedNames, fetchNames);
    dumpGraph(name, graphDef, trace, feedNames, fetchNames);
    return new CompiledGraph(name, fetchNames.length, trace.feeds);
  }

  /** Calls the function on the backend's device; `xla` compiles it with XLA (on first call per shape). */
  run(feeds: readonly tf.Tensor[], xla = false): tf.Tensor[] {
    if (feeds.length !== this.feedShapes.length) throw new Error(`graph: ${feeds.length} feeds given, the graph takes ${this.feedShapes.length}`);
    feeds.forEach((t, i) => {
      const want = this.feedShapes[i];
      if (t.dtype !== want.dtype || !tf.util.arraysEqual(t.shape, want.shape))
        throw new Error(`graph: feed ${i} is ${t.dtype} [${t.shape}], the graph takes ${want.dtype} [${want.shape}]`);
    });
    const backend = nativeBackend();
    const results = backend.binding.callFunction(this.name, backend.getInputTensorIds([...feeds]), this.outputCount, xla);
    return results.map((m) => backend.createOutputTensor(m));
  }

  dispose(): void {
    const binding = nativeBackend().binding;
    if (binding.hasFunction(this.name)) binding.removeFunction(this.name);
  }
}

/** Where to write each function's GraphDef as it is registered (a folder; unset: nowhere). */
export const DUMP_GRAPHS_ENV = 'SLAYFORMER_DUMP_GRAPHS';

/**
 * With SLAYFORMER_DUMP_GRAPHS=<folder>: <name>.pb (the GraphDef) and <name>.json (feeds with dtype and shape, fetch
 * names), to profile a step outside Node (bench/profile_graph.py; docs/graph-functions.md, "Where the step's time goes").
 */
function dumpGraph(name: string, graphDef: Uint8Array, trace: Trace, feedNames: string[], fetchNames: string[]): void {
  const dir = process.env[DUMP_GRAPHS_ENV];
  if (!dir) return;
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, `${name}.pb`), graphDef);
  const feeds = trace.feeds.map((f, i) => ({ name: feedNames[i], dtype: f.dtype, shape: f.shape }));
  fs.writeFileSync(path.join(dir, `${name}.json`), JSON.stringify({ feeds, fetches: fetchNames }, null, 1) + '\n');
}

// The protobuf classes tfjs-node ships for reading SavedModels (dist/proto/api_pb.js, google-protobuf).
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Proto = any;
let protoModule: Proto | null = null;
function proto(): Proto {
  if (protoModule) return protoModule;
  const require = createRequire(import.meta.url);
  const packageDir = path.dirname(require.resolve('@tensorflow/tfjs-node/package.json', { paths: [nativePackageDir()] }));
  protoModule = require(path.join(packageDir, 'dist', 'proto', 'api_pb.js'));
  return protoModule;
}

/** The folder the loaded tfjs-node came from (the module cache knows which copy loaded). */
function nativePackageDir(): string {
  const require = createRequire(import.meta.url);
  const loaded = Object.keys(require.cache).find((p) => /tfjs-node(-gpu)?[\\/]dist[\\/]index\.js$/.test(p));
  if (!loaded) throw new Error('graph: @tensorflow/tfjs-node is not loaded');
  return path.dirname(path.dirname(loaded));
}

/** A recorded trace as a serialized GraphDef with its feed and fetch tensor names (the XLA route exports it: src/backend/xla/program-cache.ts). */
export function traceGraphDef(trace: Trace): { graphDef: Uint8Array; feedNames: string[]; fetchNames: string[] } {
  return buildGraphDef(trace, nativeBackend().binding);
}

/** The trace as a GraphDef: feeds are placeholders feed_i, frozen values constants const_i, ops op_k. */
function buildGraphDef(trace: Trace, binding: NativeBinding): { graphDef: Uint8Array; feedNames: string[]; fetchNames: string[] } {
  const pb = proto();
  const shape = (dims: number[]) => {
    const s = new pb.TensorShape();
    for (const size of dims) {
      const dim = new pb.TensorShape.Dim();
      dim.setSize(size);
      s.addDim(dim);
    }
    return s;
  };
  const attr = (set: (v: Proto) => void) => {
    const v = new pb.AttrValue();
    set(v);
    return v;
  };
  const node = (name: string, op: string, inputs: string[], attrs: Array<[string, Proto]>) => {
    const n = new pb.NodeDef();
    n.setName(name);
    n.setOp(op);
    for (const input of inputs) n.addInput(input);
    for (const [key, value] of attrs) n.getAttrMap().set(key, value);
    return n;
  };
  const graph = new pb.GraphDef();
  const versions = new pb.VersionDef();
  // GraphDef version of TF ≥ 2.x ops (producer = TF_GRAPH_DEF_VERSION range accepted by 2.21).
  versions.setProducer(1000);
  graph.setVersions(versions);
  const feedNames = trace.feeds.map((_, i) => `feed_${i}`);
  trace.feeds.forEach((f, i) =>
    graph.addNode(
      node(
        feedNames[i],
        'Placeholder',
        [],
        [
          ['dtype', attr((v) => v.setType(dtypeEnum(binding, f.dtype)))],
          ['shape', attr((v) => v.setShape(shape(f.shape)))],
        ],
      ),
    ),
  );
  trace.constants.forEach((c, i) => {
    const t = new pb.Tensor();
    t.setDtype(c.dtype);
    t.setTensorShape(shape(c.shape));
    t.setTensorContent(c.bytes);
    graph.addNode(
      node(
        `const_${i}`,
        'Const',
        [],
        [
          ['dtype', attr((v) => v.setType(c.dtype))],
          ['value', attr((v) => v.setTensor(t))],
        ],
      ),
    );
  });
  const ref = (s: Source) => (s.kind === 'op' ? `op_${s.op}:${s.index}` : s.kind === 'feed' ? `feed_${s.index}:0` : `const_${s.value}:0`);
  trace.ops.forEach((o, k) =>
    graph.addNode(
      node(
        `op_${k}`,
        o.op,
        o.inputs.map(ref),
        o.attrs.map((a) => [a.name, attrValue(pb, binding, a, shape)]),
      ),
    ),
  );
  // A function's outputs must be computed by its body: an output that is a feed or a constant gets an Identity.
  const fetchNames = trace.outputs.map((s, i) => {
    if (s.kind === 'op') return ref(s);
    const dtype = s.kind === 'feed' ? dtypeEnum(binding, trace.feeds[s.index].dtype) : trace.constants[s.value].dtype;
    graph.addNode(node(`output_${i}`, 'Identity', [ref(s)], [['T', attr((v) => v.setType(dtype))]]));
    return `output_${i}:0`;
  });
  return { graphDef: graph.serializeBinary(), feedNames: feedNames.map((n) => `${n}:0`), fetchNames };
}

function attrValue(pb: Proto, binding: NativeBinding, a: OpAttr, shape: (dims: number[]) => Proto): Proto {
  const v = new pb.AttrValue();
  const list = Array.isArray(a.value) ? new pb.AttrValue.ListValue() : null;
  const each = (add: (x: never) => void, set: (x: never) => void) => (list ? (a.value as never[]).forEach(add) : set(a.value as never));
  switch (a.type) {
    case binding.TF_ATTR_TYPE:
      each(
        (x) => list.addType(x),
        (x) => v.setType(x),
      );
      break;
    case binding.TF_ATTR_INT:
      each(
        (x) => list.addI(x),
        (x) => v.setI(x),
      );
      break;
    case binding.TF_ATTR_FLOAT:
      each(
        (x) => list.addF(x),
        (x) => v.setF(x),
      );
      break;
    case binding.TF_ATTR_BOOL:
      each(
        (x) => list.addB(x),
        (x) => v.setB(x),
      );
      break;
    case binding.TF_ATTR_STRING:
      each(
        (x) => list.addS(Buffer.from(x as string)),
        (x) => v.setS(Buffer.from(x as string)),
      );
      break;
    case binding.TF_ATTR_SHAPE:
      // A list of shapes (recordedAsOneOp's 'shapes') or one shape.
      if (list && (a.value as unknown[]).length > 0 && (a.value as unknown[]).every(Array.isArray))
        (a.value as number[][]).forEach((dims) => list.addShape(shape(dims)));
      else {
        v.setShape(shape(a.value as number[]));
        return v;
      }
      break;
    default:
      throw new Error(`graph: attribute '${a.name}' has a type (${a.type}) this writer does not know`);
  }
  if (list) v.setList(list);
  return v;
}

type KeyState =
  | { kind: 'recorded'; trace: Trace; attempts: number }
  | { kind: 'compiled'; graph: CompiledGraph; xlaFailure?: string }
  | { kind: 'eager'; why: string };

/**
 * Runs a function as a TensorFlow function per key. The first call of a key records the program
 * until two consecutive recordings agree (same program, same constants; the first often differs
 * from the next, as constant caches fill on first use, so up to `maxRecordings` tries), builds the
 * function and returns ITS results: every result of a key comes from its function, whatever came
 * before, so a resumed run computes each step exactly as the uninterrupted one did. The recordings
 * run the program eagerly and are discarded (`fn` must not change state: it returns new tensors).
 * A key whose recordings never agree, or whose graph fails to load, stays eager (status() says why)
 * and keeps the last recording's results. At most `maxKeys` keys are recorded; later ones run
 * eagerly. `xla` asks for XLA compilation of the function; where the library cannot compile it for
 * this device, that key runs without XLA and status() says why.
 */
export class GraphCache {
  private readonly keys = new Map<string, KeyState>();

  constructor(
    private readonly maxKeys = 8,
    private readonly maxRecordings = 3,
  ) {}

  call(key: string, feeds: readonly tf.Tensor[], program: () => tf.Tensor[], xla = false): tf.Tensor[] {
    // XLA cannot compile the fused CPU kernels (native/kernels/): a program for it is recorded, and run while it is not yet one, composed.
    const fn = xla ? () => withComposedKernels(program) : program;
    const state = this.keys.get(key);
    if (state?.kind === 'compiled') return this.run(state, feeds, xla);
    if (state?.kind === 'eager' || (!state && this.keys.size >= this.maxKeys)) return fn();
    for (;;) {
      const outputs = this.record(key, feeds, fn);
      const now = this.keys.get(key)!;
      if (now.kind === 'eager') return outputs;
      tf.dispose(outputs);
      if (now.kind === 'compiled') return this.run(now, feeds, xla);
    }
  }

  /** One recording of `key`'s program; moves the key to compiled (two agreeing recordings), eager, or another try. */
  private record(key: string, feeds: readonly tf.Tensor[], fn: () => tf.Tensor[]): tf.Tensor[] {
    const state = this.keys.get(key);
    const { outputs, trace } = recordTrace(feeds, fn);
    if (trace.unfollowable) this.keys.set(key, { kind: 'eager', why: trace.unfollowable });
    else if (state?.kind !== 'recorded') this.keys.set(key, { kind: 'recorded', trace, attempts: 1 });
    else if (!sameTrace(state.trace, trace)) {
      const attempts = state.attempts + 1;
      this.keys.set(
        key,
        attempts < this.maxRecordings
          ? { kind: 'recorded', trace, attempts }
          : { kind: 'eager', why: `${attempts} recordings differed in their programs or constants` },
      );
    } else {
      try {
        this.keys.set(key, { kind: 'compiled', graph: CompiledGraph.load(trace) });
      } catch (err) {
        this.keys.set(key, { kind: 'eager', why: `the graph did not load: ${(err as Error).message.split('\n')[0]}` });
      }
    }
    return outputs;
  }

  private run(state: Extract<KeyState, { kind: 'compiled' }>, feeds: readonly tf.Tensor[], xla: boolean): tf.Tensor[] {
    if (!xla || state.xlaFailure) return state.graph.run(feeds);
    try {
      return state.graph.run(feeds, true);
    } catch (err) {
      state.xlaFailure = (err as Error).message.split('\n').find((l) => l.trim()) ?? 'failed';
      return state.graph.run(feeds);
    }
  }

  /** How `key` runs now: 'graph', 'not recorded' (never called), or why it stays eager; ' (XLA …)' after 'graph' when XLA was asked for and failed. */
  status(key: string): string {
    const state = this.keys.get(key);
    if (!state) return this.keys.size >= this.maxKeys ? 'eager: too many shapes' : 'not recorded';
    if (state.kind === 'compiled') return state.xlaFailure ? `graph (without XLA: ${state.xlaFailure})` : 'graph';
    return state.kind === 'recorded' ? 'recording' : `eager: ${state.why}`;
  }

  dispose(): void {
    for (const state of this.keys.values()) if (state.kind === 'compiled') state.graph.dispose();
    this.keys.clear();
  }
}

/** train.xla: compile graph functions with XLA (on), not (off), or what was measured faster on this kind of device (auto). */
export type XlaSetting = 'auto' | 'on' | 'off';

/**
 * XLA as measured (docs/benchmarks.md, "Graph steps as TensorFlow functions"): on a CPU device it
 * gained 0–30% at the reference shape of `npm run bench:train`, but its compilation takes tens of
 * seconds per function, outweighs the gain in the 200-step runs of `npm run tasks`, and ran out of
 * memory (23 GB) at the GPT-2-small shape, so auto leaves it off there; on a GPU it has not been
 * measured (no GPU host with TensorFlow was available), so auto leaves it off too.
 */
const XLA_AUTO: Record<'CPU' | 'GPU', boolean> = { CPU: false, GPU: false };

/** Whether graph functions are to be compiled with XLA, decided once for the backend in use. */
export function resolveXla(setting: XlaSetting): boolean {
  if (!graphsAvailable() || setting === 'off') return false;
  return setting === 'on' || XLA_AUTO[/GPU/.test(graphDevice()) ? 'GPU' : 'CPU'];
}
