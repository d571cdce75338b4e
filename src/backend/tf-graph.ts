// Graph execution on the native tensorflow backend. tfjs runs every op eagerly: on tfjs-node each
// op is a TFE_Execute through the binding plus the engine's bookkeeping, ~25–45 µs before any work,
// and a training step of the bench GPT is ~1,000 ops (`npm run bench:train -- --profile`). Here a
// computation is recorded once, op by op, as the binding executes it, written out as a TensorFlow
// GraphDef and loaded as a session (the binding's SavedModel entry points, the only graph API it
// has), so that later calls are one TF_SessionRun: no JavaScript runs per op, TF's executor runs
// independent ops side by side, and Grappler (on by default for sessions) may fold and fuse.
//
// What a graph may depend on is explicit: the feeds (tensors given at each call, matched by tensor
// identity while recording) are placeholders; everything else the ops read — values uploaded from
// JavaScript while recording, tensors that existed before — is frozen into the graph as constants.
// A graph is only built once two calls under the same key recorded the same program with the same
// constants (GraphCache), so values that change from call to call (dropout masks drawn in JS, a
// loss divisor, a redrawn projection that is not a feed) keep that key on eager execution.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';

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
  loadSavedModel(dir: string, tags: string): number;
  runSavedModel(id: number, inputs: number[], inputNames: string, outputNames: string): Array<{ id: number; shape: number[]; dtype: number }>;
  deleteSavedModel(id: number): void;
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
 * Whether graphs can run here: the tensorflow backend on its CPU device. On a GPU the binding's
 * session entry point resolves every feed to host memory (TFE_TensorHandleResolve), which would copy
 * all parameters off the device each step, so GPU runs stay eager.
 */
export function graphsAvailable(): boolean {
  if (tf.getBackend() !== 'tensorflow') return false;
  const backend = nativeBackend();
  return typeof backend.binding?.runSavedModel === 'function' && backend.isUsingGpuDevice !== true;
}

const bytesOf = (v: ArrayBufferView) => new Uint8Array(v.buffer, v.byteOffset, v.byteLength).slice();

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
      return { dtype: dtypeEnum(binding, DTYPES[tensor.dtype] ? tensor.dtype : 'float32'), shape: [...tensor.shape], bytes: bytesOf(binding.tensorDataSync(id)) };
    };
    const source = feed !== undefined ? ({ kind: 'feed', index: feed } as const) : freeze(uploads.get(id) ?? frozen());
    sources.set(id, source);
    return source;
  };
  // The binding's own properties are read-only: the backend is given a recording view of it.
  const recorder = Object.create(binding) as NativeBinding;
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
        const results = binding.executeOp(op, attrs, inputIds, count);
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
  backend.binding = recorder;
  backend.getInputTensorIds = function (this: NativeBackend, tensors: tf.TensorInfo[]) {
    const ids = getInputTensorIds.call(this, tensors);
    ids.forEach((id, i) => sourceOf(id, tensors[i]));
    return ids;
  };
  try {
    const outputs = fn();
    const outputSources = outputs.map((t) => sourceOf(handleId(backend, t), t));
    return { outputs, trace: { ops, constants, outputs: outputSources, feeds: feeds.map((t) => ({ dtype: t.dtype, shape: [...t.shape] })), unfollowable: unknown } };
  } finally {
    backend.binding = binding;
    backend.getInputTensorIds = getInputTensorIds;
  }
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

/** A loaded graph: call run() with tensors shaped as the recorded feeds. */
export class CompiledGraph {
  private constructor(
    private readonly sessionId: number,
    private readonly feedNames: string,
    private readonly fetchNames: string,
    private readonly feedShapes: Trace['feeds'],
  ) {}

  /** Writes `trace` as a SavedModel into a temporary folder, loads it, and removes the folder. */
  static load(trace: Trace): CompiledGraph {
    const binding = nativeBackend().binding;
    const { savedModel, feedNames, fetchNames } = buildSavedModel(trace, binding);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slayformer-graph-'));
    try {
      fs.writeFileSync(path.join(dir, 'saved_model.pb'), savedModel);
      return new CompiledGraph(binding.loadSavedModel(dir, 'serve'), feedNames.join(','), fetchNames.join(','), trace.feeds);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }

  run(feeds: readonly tf.Tensor[]): tf.Tensor[] {
    if (feeds.length !== this.feedShapes.length) throw new Error(`graph: ${feeds.length} feeds given, the graph takes ${this.feedShapes.length}`);
    feeds.forEach((t, i) => {
      const want = this.feedShapes[i];
      if (t.dtype !== want.dtype || !tf.util.arraysEqual(t.shape, want.shape)) throw new Error(`graph: feed ${i} is ${t.dtype} [${t.shape}], the graph takes ${want.dtype} [${want.shape}]`);
    });
    const backend = nativeBackend();
    const results = backend.binding.runSavedModel(this.sessionId, backend.getInputTensorIds([...feeds]), this.feedNames, this.fetchNames);
    return results.map((m) => backend.createOutputTensor(m));
  }

  dispose(): void {
    nativeBackend().binding.deleteSavedModel(this.sessionId);
  }
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

function buildSavedModel(trace: Trace, binding: NativeBinding): { savedModel: Uint8Array; feedNames: string[]; fetchNames: string[] } {
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
    graph.addNode(node(feedNames[i], 'Placeholder', [], [['dtype', attr((v) => v.setType(dtypeEnum(binding, f.dtype)))], ['shape', attr((v) => v.setShape(shape(f.shape)))]])),
  );
  trace.constants.forEach((c, i) => {
    const t = new pb.Tensor();
    t.setDtype(c.dtype);
    t.setTensorShape(shape(c.shape));
    t.setTensorContent(c.bytes);
    graph.addNode(node(`const_${i}`, 'Const', [], [['dtype', attr((v) => v.setType(c.dtype))], ['value', attr((v) => v.setTensor(t))]]));
  });
  const ref = (s: Source) => (s.kind === 'op' ? `op_${s.op}:${s.index}` : s.kind === 'feed' ? `feed_${s.index}:0` : `const_${s.value}:0`);
  trace.ops.forEach((o, k) => graph.addNode(node(`op_${k}`, o.op, o.inputs.map(ref), o.attrs.map((a) => [a.name, attrValue(pb, binding, a, shape)]))));
  const metaInfo = new pb.MetaGraphDef.MetaInfoDef();
  metaInfo.addTags('serve');
  const meta = new pb.MetaGraphDef();
  meta.setMetaInfoDef(metaInfo);
  meta.setGraphDef(graph);
  const savedModel = new pb.SavedModel();
  savedModel.setSavedModelSchemaVersion(1);
  savedModel.addMetaGraphs(meta);
  return { savedModel: savedModel.serializeBinary(), feedNames: feedNames.map((n) => `${n}:0`), fetchNames: trace.outputs.map(ref) };
}

function attrValue(pb: Proto, binding: NativeBinding, a: OpAttr, shape: (dims: number[]) => Proto): Proto {
  const v = new pb.AttrValue();
  const list = Array.isArray(a.value) ? new pb.AttrValue.ListValue() : null;
  const each = (add: (x: never) => void, set: (x: never) => void) => (list ? (a.value as never[]).forEach(add) : set(a.value as never));
  switch (a.type) {
    case binding.TF_ATTR_TYPE: each((x) => list.addType(x), (x) => v.setType(x)); break;
    case binding.TF_ATTR_INT: each((x) => list.addI(x), (x) => v.setI(x)); break;
    case binding.TF_ATTR_FLOAT: each((x) => list.addF(x), (x) => v.setF(x)); break;
    case binding.TF_ATTR_BOOL: each((x) => list.addB(x), (x) => v.setB(x)); break;
    case binding.TF_ATTR_STRING: each((x) => list.addS(Buffer.from(x as string)), (x) => v.setS(Buffer.from(x as string))); break;
    case binding.TF_ATTR_SHAPE: v.setShape(shape(a.value as number[])); return v;
    default: throw new Error(`graph: attribute '${a.name}' has a type (${a.type}) this writer does not know`);
  }
  if (list) v.setList(list);
  return v;
}

type KeyState = { kind: 'recorded'; trace: Trace; attempts: number } | { kind: 'compiled'; graph: CompiledGraph } | { kind: 'eager'; why: string };

/**
 * Runs a function eagerly until two consecutive calls under the same key recorded the same program
 * with the same constants, then as a graph. The first call often differs from the next (constant
 * caches fill on first use), so a key gets `maxRecordings` tries; a key that never repeats, or
 * whose graph fails to load, stays eager (status() says why). At most `maxKeys` keys are recorded;
 * later ones run eagerly.
 */
export class GraphCache {
  private readonly keys = new Map<string, KeyState>();

  constructor(
    private readonly maxKeys = 8,
    private readonly maxRecordings = 3,
  ) {}

  call(key: string, feeds: readonly tf.Tensor[], fn: () => tf.Tensor[]): tf.Tensor[] {
    const state = this.keys.get(key);
    if (state?.kind === 'compiled') return state.graph.run(feeds);
    if (state?.kind === 'eager' || (!state && this.keys.size >= this.maxKeys)) return fn();
    const { outputs, trace } = recordTrace(feeds, fn);
    if (trace.unfollowable) this.keys.set(key, { kind: 'eager', why: trace.unfollowable });
    else if (!state) this.keys.set(key, { kind: 'recorded', trace, attempts: 1 });
    else if (!sameTrace(state.trace, trace)) {
      const attempts = state.attempts + 1;
      this.keys.set(key, attempts < this.maxRecordings ? { kind: 'recorded', trace, attempts } : { kind: 'eager', why: `${attempts} calls recorded different programs or constants` });
    } else {
      try {
        this.keys.set(key, { kind: 'compiled', graph: CompiledGraph.load(trace) });
      } catch (err) {
        this.keys.set(key, { kind: 'eager', why: `the graph did not load: ${(err as Error).message.split('\n')[0]}` });
      }
    }
    return outputs;
  }

  /** How `key` runs now: 'graph', 'recording', or why it stays eager. */
  status(key: string): string {
    const state = this.keys.get(key);
    if (!state) return this.keys.size >= this.maxKeys ? 'eager: too many shapes' : 'recording';
    return state.kind === 'compiled' ? 'graph' : state.kind === 'recorded' ? 'recording' : `eager: ${state.why}`;
  }

  dispose(): void {
    for (const state of this.keys.values()) if (state.kind === 'compiled') state.graph.dispose();
    this.keys.clear();
  }
}
