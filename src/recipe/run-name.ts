// A run's name says what its command-line overrides changed in the model (docs/training.md "Run names"): the recipe
// `gpt-softmax` run with `--model.attention.name performer` is `gpt-softmax+attention=performer`, so its run folder
// is `runs/gpt-softmax+attention=performer-<timestamp>/`, and `initFrom: auto:gpt-softmax` or `compare` never take
// it for a softmax run. Overrides of other sections (train.lr, train.seed, train.maxTokens) train the same model and
// leave the name; a `--name` override is taken as it is.
import { createHash } from 'node:crypto';

/** The longest tag list written out; a longer one becomes `model-<digest>` (a folder name stays readable and short). */
const MAX_TAGS_LENGTH = 64;

/** Characters a tag keeps: those safe in a file name and in a shell word; any other becomes `_`. */
const UNSAFE = /[^A-Za-z0-9._-]/g;

/** The `--model.<key>=<value>` overrides among `overrides` (in the `=` form), each key once: its last value, at its first place. */
export function modelOverrides(overrides: readonly string[]): { key: string; value: string }[] {
  const byKey = new Map<string, string>();
  for (const arg of overrides) {
    const match = /^--(model\.[A-Za-z0-9_.-]+)=(.*)$/s.exec(arg);
    if (match) byKey.set(match[1], match[2]);
  }
  return [...byKey].map(([key, value]) => ({ key, value }));
}

/** A tag's key: `attention` for model.attention.name, the option's own name for model.attention.options.<option>. */
function tagKey(key: string): string {
  if (key === 'model.attention.name') return 'attention';
  return key.replace(/^model\.attention\.options\./, '').replace(/^model\.(attention\.)?/, '');
}

/** `name` followed by `+<key>=<value>` for each model override (recipe/load.ts applies it unless --name is given). */
export function nameWithModelOverrides(name: string, overrides: readonly string[]): string {
  const changed = modelOverrides(overrides);
  if (changed.length === 0) return name;
  const tags = changed.map(({ key, value }) => `${tagKey(key)}=${value.replace(UNSAFE, '_')}`).join('+');
  if (tags.length <= MAX_TAGS_LENGTH) return `${name}+${tags}`;
  const digest = createHash('sha256')
    .update(changed.map(({ key, value }) => `${key}=${value}`).join('\n'))
    .digest('hex')
    .slice(0, 8);
  return `${name}+model-${digest}`;
}
