// The README.md of an exported Hugging Face folder: a model card in Hugging Face's sections (docs/hugging-face.md
// "The model card"): YAML metadata (library_name, pipeline_tag, tags), then the model, its training data and
// tokenizer, its training procedure, its evaluation results, how to use it and its limitations. What it says comes from
// the model and, when the model folder sits in a run folder, from that run's records (config.json, summary.json,
// metrics.jsonl, env.json). A card never holds an absolute local path: the folder it came from is named by its run
// (`<run>/final`), the data by their folder or file names. Text from files — names, paths, recipe strings, env.json's
// commit — is written through escapeMarkdown (src/core/markdown.ts) as text, never inside a code span, where no escape
// works: a backtick, `<script>` or `](javascript:…)` in a run name shows as itself.
import path from 'node:path';
import YAML from 'yaml';
import { escapeMarkdown } from '../core/markdown.ts';
import { countParameters, type LanguageModel } from '../model/lm.ts';
import type { DataSection, TrainSection } from '../recipe/schema.ts';
import { FINAL_DIR, METRICS_FILE, SUMMARY_FILE } from './layout.ts';
import { RunFolder, runFolderOf } from './run-folder.ts';
import type { MetricRecord } from './run-record.ts';

/** Where the model came from, with no absolute path: `hf:<folder name>`, `<run>/final`, `<run>/checkpoints/step-N`, or the folder's name. */
export function describeModelSource(dir: string, fromHf: boolean): string {
  if (fromHf) return `hf:${path.basename(dir)}`;
  const { runDir } = runFolderOf(dir);
  if (runDir === null) return path.basename(dir);
  return [path.basename(runDir), ...path.relative(runDir, dir).split(path.sep)].join('/');
}

/** What a validation measured (the keys of summary.json's val_* and of a metrics.jsonl val record). */
interface Evaluation {
  loss: number;
  ppl: number;
  bpb: number | null;
  acc: number | null;
  /** Where the numbers come from, for the card. */
  from: string;
}

/** What the run folder of the model recorded, as far as it is readable. */
interface RunRecord {
  name: string;
  commit: string | null;
  dirty: boolean | null;
  steps: number | null;
  tokens: number | null;
  evaluation: Evaluation | null;
}

const numberOr = (value: unknown): number | null => (typeof value === 'number' && Number.isFinite(value) ? value : null);

/**
 * The run's records for the model saved at `step`: summary.json when the model is the run's final/ of that step, else
 * the validation record of metrics.jsonl at that step (a checkpoint), else no evaluation.
 */
function readRunRecord(runDir: string, modelDir: string, step: number | null): RunRecord {
  const run = RunFolder.at(runDir);
  // What the card says comes from the run as far as it is readable: a broken env.json, summary.json or metrics.jsonl says nothing.
  const env = run.env({ unreadable: () => {} });
  const git = (env?.git ?? {}) as Record<string, unknown>;
  const summary = run.summary({ unreadable: () => {} });
  let evaluation: Evaluation | null = null;
  let tokens: number | null = null;
  const isFinal = path.basename(modelDir) === FINAL_DIR;
  if (isFinal && summary?.val_loss !== undefined && (step === null || summary.steps === step)) {
    evaluation = {
      loss: summary.val_loss,
      ppl: summary.val_ppl ?? Math.exp(summary.val_loss),
      bpb: summary.val_bpb ?? null,
      acc: summary.val_acc ?? null,
      from: `the run's ${SUMMARY_FILE}`,
    };
    tokens = summary.tokens ?? null;
  } else if (step !== null && run.has(METRICS_FILE)) {
    for (const record of metricsIfReadable(run)) {
      if (record.step !== step) continue;
      tokens = numberOr(record.tokens) ?? tokens;
      if (record.split === 'val' && numberOr(record.loss) !== null) {
        evaluation = {
          loss: record.loss,
          ppl: numberOr(record.ppl) ?? Math.exp(record.loss),
          bpb: numberOr(record.bpb),
          acc: numberOr(record.acc),
          from: `the run's ${METRICS_FILE} at step ${step}`,
        };
      }
    }
  }
  return {
    name: path.basename(runDir),
    commit: typeof git.commit === 'string' ? git.commit : null,
    dirty: typeof git.dirty === 'boolean' ? git.dirty : null,
    steps: step ?? summary?.steps ?? null,
    tokens,
    evaluation,
  };
}

/** The run's metric records, a last line cut short left out; none when the file is broken elsewhere. */
function metricsIfReadable(run: RunFolder): MetricRecord[] {
  try {
    return run.metrics({ cutLastLine: () => {} });
  } catch {
    return [];
  }
}

export interface ModelCardInput {
  model: LanguageModel;
  /** config.json's model_type. */
  modelType: string;
  /** Why transformers' own class would compute another function (hf/config.ts nonStandardSettings). */
  nonStandard: readonly string[];
  /** The PyTorch files shipped when nonStandard is not empty. */
  pythonFiles: readonly string[];
  /** The model folder exported (absolute; never written into the card). */
  dir: string;
  fromHf: boolean;
  /** The parts of the model folder's recipe the card describes. */
  recipe: { name: string; initFrom: string | null; data: DataSection; train: TrainSection };
  /** The safetensors metadata of the model folder (its `step`). */
  metadata: Record<string, string>;
  /** The export folder's name (the example loads it by this name). */
  outName: string;
  tokenizerVocab: number;
}

const n = (value: number) => value.toLocaleString('en-US');
const md = escapeMarkdown;

/** A recipe path (data.dataset, data.tokenizer, initFrom) without its local part: a folder or file name. */
function localName(value: string): string {
  if (value.startsWith('auto:')) return value;
  if (value.startsWith('hf:')) return `hf:${path.basename(value.slice(3))}`;
  return path.basename(value);
}

/** initFrom without its local part: `auto:<name>` and `hf:<folder name>` as they are, a model folder by its run (`<run>/final`). */
function initFromName(value: string): string {
  return value.startsWith('auto:') || value.startsWith('hf:') ? localName(value) : describeModelSource(path.resolve(value), false);
}

/** The README.md of the export (see the top of this file). */
export function modelCard(input: ModelCardInput): string {
  const { model, recipe } = input;
  const c = model.config;
  const gpt = c.kind === 'gpt';
  const custom = input.nonStandard.length > 0;
  const stepText = input.metadata.step;
  const step = stepText !== undefined && /^\d+$/.test(stepText) ? Number(stepText) : null;
  const { runDir } = input.fromHf ? { runDir: null } : runFolderOf(input.dir);
  const run = runDir === null ? null : readRunRecord(runDir, input.dir, step);
  const title = input.fromHf ? path.basename(input.dir) : recipe.name;
  const parameters = countParameters(c).total;
  const attention = c.attention.name;

  const metadata = {
    library_name: 'transformers',
    pipeline_tag: gpt ? 'text-generation' : 'fill-mask',
    tags: ['slayformer', gpt ? 'gpt2' : 'bert', gpt ? 'causal-lm' : 'masked-lm', attention, ...(custom ? ['custom_code'] : [])],
  };

  const description = [
    '## Model description',
    '',
    `- **Kind:** ${gpt ? 'causal language model (GPT-2 layout: next-token prediction)' : 'masked language model (BERT layout: masked-token prediction)'}, ` +
      `model_type \`${input.modelType}\`.`,
    `- **Attention:** ${attention} attention, options \`${JSON.stringify(c.attention.options)}\`${attention === 'softmax' ? ' (exact scaled dot-product attention)' : ''}.`,
    `- **Size:** ${n(parameters)} parameters: ${c.numLayers} layers, width ${c.dModel}, ${c.numHeads} heads, MLP ${c.mlpRatio}× the width, ` +
      `context ${n(c.maxSeqLen)} tokens, vocabulary ${n(c.vocabSize)}.`,
    ...(recipe.initFrom !== null
      ? [
          `- **Finetuned from:** ${md(initFromName(recipe.initFrom))}${recipe.train.freeze !== 'none' ? `, training only ${md(JSON.stringify(recipe.train.freeze))} (train.freeze)` : ''}.`,
        ]
      : []),
    `- **Exported from:** ${md(describeModelSource(input.dir, input.fromHf))} by slayformer's \`npm run export\`.`,
  ];

  const data = ['## Training data and tokenizer', ''];
  if (input.fromHf) {
    data.push('Not recorded: the model was exported from a Hugging Face folder, which names no training data.', '');
  } else {
    data.push(
      `- **Dataset:** ${md(localName(recipe.data.dataset))} (a local \`datasets\` folder; text column ${md(recipe.data.textColumn)}), ` +
        `${gpt ? `windows of ${recipe.data.seqLen} tokens` : `sequences of up to ${recipe.data.seqLen} tokens, masked as BERT's masked-language-model objective`}.`,
    );
  }
  data.push(
    `- **Tokenizer:** \`tokenizer.json\` in this folder, ${n(input.tokenizerVocab)} tokens (the recipe's data.tokenizer, ${md(localName(recipe.data.tokenizer))}), loaded by \`AutoTokenizer\`.`,
  );

  const training = ['## Training procedure', ''];
  if (input.fromHf || run === null) {
    training.push(
      input.fromHf
        ? 'Not recorded (exported from a Hugging Face folder).'
        : `Not recorded: ${md(describeModelSource(input.dir, false))} is not inside a run folder.`,
    );
    if (!input.fromHf) training.push('', `Recipe ${md(recipe.name)}.`);
  } else {
    const t = recipe.train;
    const commit =
      run.commit === null
        ? 'an unknown slayformer commit'
        : `slayformer commit ${md(run.commit.slice(0, 12))}${run.dirty ? ' (with uncommitted changes)' : ''}`;
    training.push(
      `- **Recipe:** ${md(recipe.name)} (run ${md(run.name)}), trained with ${commit}.`,
      `- **Amount:** ${run.steps === null ? 'an unrecorded number of' : n(run.steps)} optimizer steps${run.tokens === null ? '' : `, ${n(run.tokens)} tokens`}; ` +
        `a step is batchSize ${t.batchSize} × gradAccum ${t.gradAccum} × seqLen ${recipe.data.seqLen} = ${n(t.batchSize * t.gradAccum * recipe.data.seqLen)} tokens.`,
      `- **Optimizer:** AdamW, lr ${t.lr} (${t.schedule} schedule to ${t.minLr} after ${t.warmupFraction === null ? `${t.warmupSteps} warm-up steps` : `a warm-up of ${t.warmupFraction} of the steps`}), weight decay ${t.weightDecay}, gradient clipping ${t.clip}; ` +
        `dropout ${c.dropout}; seed ${t.seed}.`,
    );
  }

  const evaluation = ['## Evaluation results', ''];
  const result = run?.evaluation ?? null;
  if (result === null) {
    evaluation.push('No evaluation was recorded with this model (`npm run eval -- <this model> --data <dataset>` measures one).');
  } else {
    evaluation.push(
      `On the first ${n(recipe.train.evalTokens)} labelled tokens of the validation split of ${md(localName(recipe.data.dataset))} (from ${result.from}):`,
      '',
      '| metric | value |',
      '| --- | --- |',
      `| loss (nats/token) | ${result.loss.toFixed(4)} |`,
      `| perplexity | ${result.ppl.toFixed(2)} |`,
      ...(result.bpb === null ? [] : [`| bits per byte | ${result.bpb.toFixed(4)} |`]),
      ...(result.acc === null ? [] : [`| ${gpt ? 'next-token' : 'masked-token'} accuracy | ${result.acc.toFixed(4)} |`]),
    );
  }

  const load = gpt ? 'AutoModelForCausalLM' : 'AutoModelForMaskedLM';
  const remote = custom ? ', trust_remote_code=True' : '';
  const use = [
    '## How to use',
    '',
    custom
      ? `transformers has no class for it (${md(input.nonStandard.join('; '))}), so its model_type is \`${input.modelType}\` and the folder carries its PyTorch implementation (\`${input.pythonFiles.join('`, `')}\`), loaded with \`trust_remote_code=True\`:`
      : 'transformers loads it as is:',
    '',
    '```python',
    `from transformers import ${load}, AutoTokenizer`,
    // A Python string literal (JSON's escapes are Python's): a quote or line break in the name cannot end it, nor the block.
    `folder = ${JSON.stringify(input.outName)}  # this folder`,
    `model = ${load}.from_pretrained(folder${remote})`,
    `tokenizer = AutoTokenizer.from_pretrained(folder${remote})`,
    ...(gpt
      ? ['ids = tokenizer("The", return_tensors="pt").input_ids', 'print(tokenizer.decode(model.generate(ids, max_new_tokens=20, do_sample=False)[0]))']
      : []),
    '```',
    ...(custom
      ? [
          '',
          `The \`slayformer\` section of config.json records the attention and the architecture; tensors with no place in transformers' layout are stored as ` +
            "`slayformer.<name>` (the mechanism's parameters and random projections, read as they are: nothing is drawn again). " +
            (gpt ? 'generate() decodes from a cache: keys and values for softmax and exact Yat, running sums for the kernel mechanisms. ' : '') +
            `Loaded as plain ${gpt ? 'GPT-2 (GPT2LMHeadModel)' : 'BERT (BertForMaskedLM)'} it fails (its config's layer_types name this attention) instead of computing softmax attention.`,
        ]
      : []),
  ];

  const limitations = [
    '## Limitations',
    '',
    `- A small research model (${n(parameters)} parameters${run?.tokens ? `, ${n(run.tokens)} training tokens` : ''}) for comparing attention mechanisms on equal terms; ` +
      'it is not trained or evaluated for any use beyond that, and what it writes reflects its training text.',
    `- The numbers above are one run on one validation slice; compare mechanisms over several seeds (\`npm run compare\`).`,
    ...(attention === 'softmax'
      ? []
      : [`- ${attention} attention approximates or replaces softmax attention: the model is not interchangeable with a softmax model of the same weights.`]),
    `- Its context is ${n(c.maxSeqLen)} tokens: it has position embeddings for no more.`,
  ];

  return [
    '---',
    YAML.stringify(metadata).trimEnd(),
    '---',
    '',
    `# ${md(title)}`,
    '',
    `${gpt ? 'A causal' : 'A masked'} language model with ${attention} attention, trained with slayformer.`,
    '',
    ...description,
    '',
    ...data,
    '',
    ...training,
    '',
    ...evaluation,
    '',
    ...use,
    '',
    ...limitations,
    '',
  ].join('\n');
}
