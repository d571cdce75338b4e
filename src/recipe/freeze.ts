// train.freeze: which parameters a run keeps fixed. The recipe checks the value (freezeProblem); the trainer splits a
// built model's parameters with frozenRule (train/finetune.ts partitionParameters).

const FREEZE_PRESETS = ['none', 'all-but-qkv'] as const;
/** `none`, `all-but-qkv`, or globs over parameter names whose matches are frozen (`*` any run of characters, `?` one). */
export type FreezeSpec = (typeof FREEZE_PRESETS)[number] | string[];

/** Null when `value` is a valid train.freeze, else what it should be (for the recipe's error message). */
export function freezeProblem(value: unknown): string | null {
  if (typeof value === 'string' && (FREEZE_PRESETS as readonly string[]).includes(value)) return null;
  if (Array.isArray(value) && value.length > 0 && value.every((g) => typeof g === 'string' && g !== '')) return null;
  return `one of ${FREEZE_PRESETS.join(', ')} or a non-empty list of parameter-name globs (e.g. ["embed.*", "blocks.0.*"])`;
}

function globRegExp(glob: string): RegExp {
  const body = glob
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '.*')
    .replace(/\?/g, '.');
  return new RegExp(`^${body}$`);
}

const QKV_PROJECTION = /^blocks\.\d+\.attn\.[qkv]\.(weight|bias)$/;

/**
 * Whether `freeze` keeps the parameter of a name fixed, among a model's parameter `names`; `mechanismParameters` are
 * the attention mechanisms' own trainable parameters (trained under all-but-qkv with the q, k, v projections). Errors
 * name train.freeze: an invalid value, a glob that matches no parameter.
 */
export function frozenRule(freeze: FreezeSpec, names: readonly string[], mechanismParameters: ReadonlySet<string>): (name: string) => boolean {
  const problem = freezeProblem(freeze);
  if (problem) throw new Error(`train.freeze must be ${problem} (got ${JSON.stringify(freeze)})`);
  if (freeze === 'none') return () => false;
  if (freeze === 'all-but-qkv') return (name) => !QKV_PROJECTION.test(name) && !mechanismParameters.has(name);
  const patterns = freeze.map((glob) => ({ glob, re: globRegExp(glob) }));
  const unmatched = patterns.filter((p) => !names.some((n) => p.re.test(n))).map((p) => p.glob);
  if (unmatched.length > 0) {
    throw new Error(
      `train.freeze: ${unmatched.map((g) => JSON.stringify(g)).join(', ')} match no parameter (names look like ${names.slice(0, 3).join(', ')}, …)`,
    );
  }
  return (name) => patterns.some((p) => p.re.test(name));
}
