// The registry of attention mechanisms by name, with option validation shared by all of them.
import type { AttentionConfig, AttentionModule, OptionSpec, OptionSpecs, TensorDeclaration } from './types.ts';

export type ResolvedOptions = Record<string, number | string | boolean>;

/**
 * What a mechanism file registers. Everything else in the project reads mechanisms through this registry (recipe
 * validation, the recipe docs' table, checkpoint shape checks, memory estimates), so a new mechanism is its file
 * plus its import line in index.ts (docs/attention.md, "Adding a mechanism").
 */
export interface AttentionEntry {
  description: string;
  /**
   * Whether it forms the length × length score matrix: memory and time quadratic in the length (the recipe's tensor
   * size check and the trainer's memory estimate count B·H·L² scores), decoding keeps a key/value cache, and it
   * has no segmentLength (linear mechanisms carry O(1) sums instead).
   */
  quadratic: boolean;
  /** Defined for causal use only (GLA's decay runs forward in time): a bidirectional request (a BERT) is an error naming it. */
  causalOnly?: boolean;
  /** Every option with its bounds (integer options declare their maximum: src/core/bounds.ts), checked before `create`. */
  options: OptionSpecs;
  create(config: AttentionConfig, options: ResolvedOptions): AttentionModule;
  /**
   * The tensors `create` makes (trainable variables and buffers), computed without allocating or drawing them:
   * a checkpoint's tensors are compared with these before any model is built from its config.
   */
  tensors(config: Omit<AttentionConfig, 'scope'>, options: ResolvedOptions): TensorDeclaration[];
  /**
   * Linear mechanisms (quadratic false) only: the feature map φ they contract with, for the model FLOPs count
   * (src/model/flops.ts, docs/training.md "Model FLOPs and MFU") and the state size (m features per head).
   */
  featureMap?(config: Omit<AttentionConfig, 'scope'>, options: ResolvedOptions): FeatureMapCost;
}

/** A linear mechanism's φ: m features per head, and the forward FLOPs per token and head of φ(q) or φ(k) (one side). */
export interface FeatureMapCost {
  features: number;
  flopsPerSide: number;
}

const registry = new Map<string, AttentionEntry>();

export function registerAttention(name: string, entry: AttentionEntry): void {
  if (registry.has(name)) throw new Error(`attention '${name}' is registered twice`);
  if (!entry.quadratic && !entry.featureMap) throw new Error(`attention '${name}' is linear (quadratic: false) but declares no featureMap`);
  registry.set(name, entry);
}

export function attentionNames(): string[] {
  return [...registry.keys()];
}

export function attentionOptionSpecs(name: string): OptionSpecs {
  return lookup(name).options;
}

export function attentionDescription(name: string): string {
  return lookup(name).description;
}

export function attentionIsQuadratic(name: string): boolean {
  return lookup(name).quadratic;
}

export function attentionIsCausalOnly(name: string): boolean {
  return lookup(name).causalOnly === true;
}

/** Why `name` cannot run as a model of this kind (a causal-only mechanism in a BERT), or null. */
export function attentionKindProblem(name: string, kind: string): string | null {
  if (kind === 'gpt' || !attentionIsCausalOnly(name)) return null;
  return `model.attention.name '${name}' is causal only: use it with model.kind gpt (got ${kind})`;
}

function lookup(name: string): AttentionEntry {
  const entry = registry.get(name);
  if (!entry) throw new Error(`unknown attention '${name}'; allowed: ${attentionNames().join(', ')}`);
  return entry;
}

let anonymousScopes = 0;

/**
 * Builds a mechanism by name:
 *   createAttention('slay', { numHeads: 4, headDim: 32, causal: true, seed: 1, quadratureNodes: 2 })
 * Unknown names, unknown options and out-of-range values fail with an error naming them.
 */
export function createAttention(name: string, config: AttentionRequest): AttentionModule {
  const { entry, base, scope, resolved } = checkRequest(name, config);
  return entry.create({ ...base, scope: scope ?? `attn${anonymousScopes++}` }, resolved);
}

/**
 * The tensors createAttention(name, config) would make — names after the scope, shapes, trainable or not — with
 * the same checks, but nothing allocated or drawn.
 */
export function attentionTensors(name: string, config: AttentionRequest): TensorDeclaration[] {
  const { entry, base, resolved } = checkRequest(name, config);
  return entry.tensors(base, resolved);
}

/** The feature map of linear mechanism `name` under `config` (null for a quadratic one), with the same checks as createAttention. */
export function attentionFeatureMap(name: string, config: AttentionRequest): FeatureMapCost | null {
  const { entry, base, resolved } = checkRequest(name, config);
  return entry.featureMap ? entry.featureMap(base, resolved) : null;
}

type AttentionRequest = Partial<AttentionConfig> & { numHeads: number; headDim: number; causal?: boolean } & Record<string, unknown>;

function checkRequest(name: string, config: AttentionRequest) {
  const entry = lookup(name);
  const { numHeads, headDim, causal = false, seed = 0, scope, ...rest } = config;
  positiveInt(name, 'numHeads', numHeads);
  positiveInt(name, 'headDim', headDim);
  if (typeof causal !== 'boolean') throw new Error(`attention '${name}': option 'causal' must be true or false (got ${String(causal)})`);
  if (!causal && entry.causalOnly) throw new Error(`attention '${name}' is causal only (a GPT): it has no bidirectional form`);
  if (!Number.isInteger(seed)) throw new Error(`attention '${name}': option 'seed' must be an integer (got ${String(seed)})`);
  return { entry, base: { numHeads, headDim, causal, seed }, scope, resolved: resolveOptions(name, entry.options, rest) };
}

function positiveInt(name: string, key: string, value: unknown): void {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new Error(`attention '${name}': option '${key}' must be an integer ≥ 1 (got ${String(value)})`);
  }
}

export function resolveOptions(name: string, specs: OptionSpecs, given: Record<string, unknown>): ResolvedOptions {
  const out: ResolvedOptions = {};
  for (const key of Object.keys(given)) {
    if (given[key] === undefined) continue;
    if (!(key in specs)) {
      const allowed = ['numHeads', 'headDim', 'causal', 'seed', ...Object.keys(specs)].join(', ');
      throw new Error(`attention '${name}': unknown option '${key}'; allowed: ${allowed}`);
    }
  }
  for (const [key, spec] of Object.entries(specs)) {
    const value = given[key] ?? spec.default;
    out[key] = checkOption(name, key, spec, value);
  }
  return out;
}

function checkOption(name: string, key: string, spec: OptionSpec, value: unknown): number | string | boolean {
  const fail = (expected: string) => new Error(`attention '${name}': option '${key}' must be ${expected} (got ${JSON.stringify(value)})`);
  switch (spec.kind) {
    case 'int': {
      if (typeof value !== 'number' || !Number.isInteger(value)) throw fail('an integer');
      if (spec.min !== undefined && value < spec.min) throw fail(`an integer ≥ ${spec.min}`);
      if (spec.max !== null && value > spec.max) throw fail(`an integer ≤ ${spec.max}`);
      return value;
    }
    case 'number': {
      if (typeof value !== 'number' || !Number.isFinite(value)) throw fail('a finite number');
      if (spec.min !== undefined && value < spec.min) throw fail(`a number ≥ ${spec.min}`);
      if (spec.exclusiveMin !== undefined && value <= spec.exclusiveMin) throw fail(`a number > ${spec.exclusiveMin}`);
      if (spec.max !== undefined && value > spec.max) throw fail(`a number ≤ ${spec.max}`);
      return value;
    }
    case 'enum': {
      if (typeof value !== 'string' || !spec.values.includes(value)) throw fail(`one of ${spec.values.join(', ')}`);
      return value;
    }
    case 'bool': {
      if (typeof value !== 'boolean') throw fail('true or false');
      return value;
    }
  }
}
