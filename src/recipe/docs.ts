// docs/recipes.md's tables, generated from RECIPE_SCHEMA and the attention registry (a test keeps the file equal).
import { attentionNames, attentionOptionSpecs } from '../model/attention/index.ts';
import { boundsText, isStatic, KEYS, REQUIRED, SCHEMA } from './schema.ts';
import type { DerivedDefault, FieldSpec } from './schema.ts';

/**
 * Markdown tables of every recipe key and every attention option, generated from RECIPE_SCHEMA and the
 * attention registry; docs/recipes.md embeds this between its GENERATED markers (a test keeps them equal).
 */
export function renderRecipeDocs(): string {
  const lines: string[] = [];
  let section = '';
  for (const key of KEYS) {
    const top = key.includes('.') ? key.slice(0, key.indexOf('.')) : '(top level)';
    if (top !== section) {
      section = top;
      lines.push('', `### ${section}`, '', '| key | type | default | meaning |', '| --- | --- | --- | --- |');
    }
    const spec = SCHEMA[key];
    lines.push(`| \`${key}\` | ${typeText(spec)} | ${defaultText(spec.default)} | ${spec.doc} |`);
  }
  lines.push('', '### Attention options (`model.attention.options`, per `model.attention.name`)', '');
  lines.push('| attention | option | type | default | meaning |', '| --- | --- | --- | --- | --- |');
  for (const name of attentionNames()) {
    const specs = Object.entries(attentionOptionSpecs(name));
    if (specs.length === 0) lines.push(`| \`${name}\` | — | | | no options |`);
    for (const [option, spec] of specs) {
      const type = spec.kind === 'enum' ? spec.values.map((v) => `\`${v}\``).join(' \\| ') : optionTypeText(spec);
      lines.push(`| \`${name}\` | \`${option}\` | ${type} | \`${String(spec.default)}\` | ${spec.doc} |`);
    }
  }
  return lines.join('\n').trimStart() + '\n';
}

function typeText(spec: FieldSpec): string {
  const t = spec.type;
  let text: string;
  switch (t.kind) {
    case 'int':
    case 'number':
      text = [t.kind === 'int' ? 'integer' : 'number', ...boundsText(t)].join(' ');
      break;
    case 'string':
      text = t.path ? 'path' : 'string';
      break;
    case 'bool':
      text = 'boolean';
      break;
    case 'enum':
      text = t.values.map((v) => `\`${v}\``).join(' \\| ');
      break;
    case 'attentionName':
      text = 'attention name';
      break;
    case 'attentionOptions':
      text = 'mapping';
      break;
    case 'custom':
      text = t.text;
      break;
  }
  return spec.nullable ? `${text} or \`null\`` : text;
}

function optionTypeText(spec: { kind: string; min?: number; max?: number | null; exclusiveMin?: number }): string {
  const noun = spec.kind === 'int' ? 'integer' : spec.kind === 'bool' ? 'boolean' : 'number';
  const bounds = [
    spec.min !== undefined ? `≥ ${spec.min}` : '',
    spec.exclusiveMin !== undefined ? `> ${spec.exclusiveMin}` : '',
    spec.max !== undefined && spec.max !== null ? `≤ ${spec.max}` : '',
  ].filter(Boolean);
  return bounds.length ? `${noun} ${bounds.join(', ')}` : noun;
}

function defaultText(value: unknown): string {
  if (value === REQUIRED) return '**required**';
  if (!isStatic(value)) return (value as DerivedDefault).derived;
  return `\`${JSON.stringify(value)}\``;
}
