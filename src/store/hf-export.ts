// `npm run export -- <checkpoint> --format hf --out DIR`: a trained model as a Hugging Face folder.
//
//   config.json             GPT2Config / BertConfig fields (src/hf/config.ts), model_type gpt2 or bert when
//                           transformers' class computes the same function as this model, else
//                           slayformer-gpt2 / slayformer-bert with `auto_map`; the `slayformer` section
//                           records the attention and the settings the standard fields cannot express
//   model.safetensors       float32, transformers' names and layouts (src/hf/weights.ts), metadata format "pt"
//   tokenizer.json          the run's tokenizer, byte for byte
//   tokenizer_config.json   PreTrainedTokenizerFast with the special tokens, so AutoTokenizer loads it
//   README.md               the model card (model-card.ts): Hugging Face's sections, from the model and its run's
//                           records; no absolute local path, here or in config.json
//   configuration_slayformer.py, modeling_slayformer.py
//                           slayformer-* only: the PyTorch implementation (src/hf/python/), which
//                           transformers loads with trust_remote_code=True
//
// The folder is written under a temporary name (`<out>.partial-<pid>`, removed when a write fails, and by a later
// export when its process died), fsynced and renamed into place. An existing folder is
// replaced only with --overwrite and only when it is an earlier export (nothing but the files above,
// and a config.json with the `slayformer` section): the project never deletes files it did not write.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { hostname } from 'node:os';
import path from 'node:path';
import { TextTokenizer } from '../data/tokenizer.ts';
import type { LanguageModel } from '../model/lm.ts';
import { hfConfigJson, nonStandardSettings, PYTHON_CONFIG_MODULE, PYTHON_MODEL_MODULE, SECTION, type HfLayout } from '../hf/config.ts';
import { CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE } from '../hf/folder.ts';
import { encodeSafetensors, type NamedArray } from '../hf/safetensors.ts';
import { encodeTensor, hfShape, tensorRules } from '../hf/weights.ts';
import { removeOwnFolder, syncDir, writeFileSynced } from '../core/atomic-folder.ts';
import { holderIsLive } from '../core/lock-file.ts';
import { loadModel, loadModelTokenizer } from './load-model.ts';
import { describeModelSource, modelCard } from './model-card.ts';
import { hfFolderOf } from './resolve.ts';
import { modelTensors } from './model-folder.ts';
import { makeFolders } from '../core/folders.ts';

export const EXPORT_FORMATS = ['hf'] as const;
const TOKENIZER_CONFIG_FILE = 'tokenizer_config.json';
const README_FILE = 'README.md';
/** The PyTorch implementation shipped with custom exports, by file name. */
const PYTHON_FILES = [PYTHON_CONFIG_MODULE, PYTHON_MODEL_MODULE].map((m) => `${m}.py`);
const PYTHON_DIR = new URL('../hf/python/', import.meta.url);
const EXPORT_FILES = [CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, README_FILE, ...PYTHON_FILES];

export interface ExportOptions {
  out: string;
  /** tokenizer.json to ship (default: the one the model was trained with, data.tokenizer of its recipe). */
  tokenizer?: string;
  /** Replace an earlier export at `out`. */
  overwrite?: boolean;
}

export interface ExportResult {
  out: string;
  modelType: string;
  /** Why transformers' own class would compute another function (empty: from_pretrained loads it as is). */
  nonStandard: string[];
  tensors: number;
  /** Partial folders of exports to `out` that died, removed (see removeDeadPartials). */
  removedPartials: string[];
}

/** Loads `checkpoint` (any model folder eval accepts) and writes it as a Hugging Face folder; the backend must be initialised. */
export async function exportHf(checkpoint: string, opts: ExportOptions): Promise<ExportResult> {
  const out = path.resolve(opts.out);
  checkReplaceable(out, opts.overwrite ?? false);
  const loaded = await loadModel(checkpoint);
  const { dir, model } = loaded;
  const fromHf = hfFolderOf(checkpoint) !== null;
  try {
    const tokenizer = await loadModelTokenizer(loaded, opts.tokenizer);
    const tokenizerPath = tokenizer.path;
    const drawLayouts = model.body.attention.map((a) => a.drawLayout);
    const config = hfConfigJson(model.config, { specialIds: tokenizer.specialIds, source: describeModelSource(dir, fromHf), drawLayouts });
    const nonStandard = nonStandardSettings(model.config);
    const tensors = await hfTensors(model);
    const files = new Map<string, string | Uint8Array>([
      [CONFIG_FILE, JSON.stringify(config, null, 2) + '\n'],
      [WEIGHTS_FILE, encodeSafetensors(tensors, { format: 'pt' })],
      [TOKENIZER_FILE, readFileSync(tokenizerPath)],
      [TOKENIZER_CONFIG_FILE, JSON.stringify(tokenizerConfig(tokenizerPath, tokenizer, model.config.maxSeqLen), null, 2) + '\n'],
      [
        README_FILE,
        modelCard({
          model,
          modelType: config.model_type as string,
          nonStandard,
          pythonFiles: PYTHON_FILES,
          dir,
          fromHf,
          recipe: loaded.recipe,
          metadata: loaded.metadata,
          outName: path.basename(out),
          tokenizerVocab: tokenizer.vocabSize,
        }),
      ],
    ]);
    if (nonStandard.length > 0) {
      for (const file of PYTHON_FILES) files.set(file, readFileSync(new URL(file, PYTHON_DIR)));
    }
    const removedPartials = await removeDeadPartials(out);
    await writeFolder(out, files);
    return { out, modelType: config.model_type as string, nonStandard, tensors: tensors.size, removedPartials };
  } finally {
    model.dispose();
  }
}

/** The model's parameters and buffers under transformers' names and layouts, sorted by name (as transformers writes them). */
async function hfTensors(model: LanguageModel): Promise<Map<string, NamedArray>> {
  const ours = await modelTensors(model);
  const layout: HfLayout = model.kind === 'gpt' ? 'gpt2' : 'bert';
  const out = new Map<string, NamedArray>();
  const rules = tensorRules(layout, ours.keys()).sort((a, b) => (a.hf < b.hf ? -1 : 1));
  for (const rule of rules) {
    const shape = ours.get(rule.ours[0])!.shape;
    out.set(rule.hf, {
      shape: hfShape(rule, shape),
      data: encodeTensor(
        rule,
        rule.ours.map((n) => ours.get(n)!.data),
        shape,
      ),
    });
  }
  return out;
}

/** AutoTokenizer's settings: the fast tokenizer over tokenizer.json, with its special tokens named. */
function tokenizerConfig(file: string, tokenizer: TextTokenizer, maxLength: number): Record<string, unknown> {
  const json = JSON.parse(readFileSync(file, 'utf8')) as { added_tokens?: { id: number; content: string }[]; model?: { vocab?: unknown } };
  const contentOf = new Map<number, string>();
  if (json.model?.vocab && typeof json.model.vocab === 'object' && !Array.isArray(json.model.vocab)) {
    for (const [content, id] of Object.entries(json.model.vocab as Record<string, number>)) contentOf.set(id, content);
  }
  for (const t of json.added_tokens ?? []) contentOf.set(t.id, t.content);
  const s = tokenizer.specialIds;
  const named = (id: number | undefined) => (id === undefined ? undefined : contentOf.get(id));
  const specials = {
    bos_token: named(s.eos),
    eos_token: named(s.eos),
    unk_token: named(s.unk),
    pad_token: named(s.pad),
    mask_token: named(s.mask),
    cls_token: named(s.cls),
    sep_token: named(s.sep),
  };
  return {
    tokenizer_class: 'PreTrainedTokenizerFast',
    model_max_length: maxLength,
    clean_up_tokenization_spaces: false,
    ...Object.fromEntries(Object.entries(specials).filter(([, v]) => v !== undefined)),
  };
}

/** Throws unless `out` is free, or --overwrite was given and it is an earlier export (see the file comment). */
function checkReplaceable(out: string, overwrite: boolean): void {
  if (!existsSync(out)) return;
  if (!overwrite) throw new Error(`${out} already exists; pass --overwrite to replace an earlier export`);
  const foreign = readdirSync(out).filter((f) => !EXPORT_FILES.includes(f));
  let section: unknown;
  try {
    section = (JSON.parse(readFileSync(path.join(out, CONFIG_FILE), 'utf8')) as Record<string, unknown>)[SECTION];
  } catch {
    section = undefined;
  }
  if (section === undefined || foreign.length > 0) {
    const why = section === undefined ? `its ${CONFIG_FILE} has no "${SECTION}" section` : `it holds ${foreign.join(', ')}, which export does not write`;
    throw new Error(`${out} was not written by npm run export (${why}); not replacing it`);
  }
}

/**
 * Removes `<out>.partial-<pid>` folders of exports that died (killed, or stopped by a full disk before the cleanup
 * below): their process no longer runs on this host and they hold nothing but export files. Returns them.
 */
async function removeDeadPartials(out: string): Promise<string[]> {
  const parent = path.dirname(out);
  const prefix = `${path.basename(out)}.partial-`;
  const removed: string[] = [];
  for (const entry of existsSync(parent) ? readdirSync(parent) : []) {
    const pid = entry.startsWith(prefix) ? entry.slice(prefix.length) : '';
    if (!/^\d+$/.test(pid) || holderIsLive({ pid: Number(pid), host: hostname() })) continue;
    const folder = path.join(parent, entry);
    if (await removeOwnFolder(folder, new Set(EXPORT_FILES))) removed.push(folder);
  }
  return removed;
}

async function writeFolder(out: string, files: Map<string, string | Uint8Array>): Promise<void> {
  const tmp = `${out}.partial-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  makeFolders(tmp);
  try {
    for (const [name, data] of files) await writeFileSynced(path.join(tmp, name), data);
    await syncDir(tmp);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true }); // a full disk: what was written is of no use
    throw err;
  }
  if (existsSync(out)) {
    const old = `${out}.old-${process.pid}`;
    await rename(out, old);
    await rename(tmp, out);
    await rm(old, { recursive: true, force: true });
  } else {
    await rename(tmp, out);
  }
  await syncDir(path.dirname(out));
}
