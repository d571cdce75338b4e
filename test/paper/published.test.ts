// The published numbers the paper experiments compare with, checked against the paper's own text (the SLAY paper in
// the shared folder's papers/, found through its README index): every task × mechanism of Tables 3–9 and every
// method × scale of Table 10, parsed from the text independently of how src/paper/ writes them down. Without the
// shared folder the check is skipped with one line saying so.
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PUBLISHED_TABLE_10 } from '../../src/paper/slay-ablation.ts';
import { PAPER_MECHANISMS, paperTableOf, publishedAccuracy } from '../../src/paper/slay-tasks.ts';
import { TASK_NAMES } from '../../src/paper/synthetic-tasks.ts';
import { SHARED_DIR } from '../helpers/shared.ts';

const PAPERS = path.join(SHARED_DIR, 'papers');

/** The file the papers' README index lists as the SLAY paper's full text. */
function slayPaperText(): string | null {
  const index = path.join(PAPERS, 'README.md');
  if (!existsSync(index)) return null;
  const row = readFileSync(index, 'utf8')
    .split('\n')
    .find((l) => /SLAY: Spherical Linearized Attention/.test(l) && /full text/.test(l));
  const file = row?.match(/\|\s*(\S+\.txt)\s*\|/)?.[1];
  return file ? readFileSync(path.join(PAPERS, file), 'utf8') : null;
}

const text = slayPaperText();
if (!text) console.log(`[slayformer] ${PAPERS}: the SLAY paper's text not found; the transcription check is skipped`);

/** The tab-separated block after the line starting with `Table N.`: its header and its rows. */
function tableBlock(source: string, table: string): string[][] {
  const lines = source.split('\n');
  const start = lines.findIndex((l) => l.startsWith(`${table}.`));
  expect(start, table).toBeGreaterThanOrEqual(0);
  const rows: string[][] = [];
  for (const line of lines.slice(start + 1)) {
    if (line.trim() === '') {
      if (rows.length > 0) break;
      continue;
    }
    rows.push(line.split('\t').map((c) => c.trim()));
  }
  return rows;
}

const PAPER_ROW_NAMES: Record<string, string> = {
  softmax: 'Standard',
  'yat-spherical': 'Spherical-YAT',
  performer: 'Performer',
  'linear-elu': 'Linear',
  slay: 'SLAY',
};
/** "Kv Recall" → kv_recall. */
const taskOf = (header: string) => header.toLowerCase().replace(/ /g, '_');

describe.skipIf(!text)('published numbers', () => {
  it('every task × mechanism of Tables 3–9 as the paper prints it', () => {
    const seen = new Set<string>();
    for (const n of [3, 4, 5, 6, 7, 8, 9]) {
      const [header, ...rows] = tableBlock(text!, `Table ${n}`);
      expect(header[0]).toBe('Method');
      expect(rows.map((r) => r[0])).toEqual(PAPER_MECHANISMS.map((m) => PAPER_ROW_NAMES[m]));
      header.slice(1).forEach((column, i) => {
        const task = taskOf(column);
        expect(TASK_NAMES).toContain(task);
        expect(paperTableOf(task).table).toBe(`Table ${n}`);
        seen.add(task);
        PAPER_MECHANISMS.forEach((mechanism, r) => {
          const printed = rows[r][i + 1];
          const ours = publishedAccuracy(task, mechanism);
          if (printed === '–') expect(ours, `${task} ${mechanism}`).toBeNull();
          else {
            const [mean, sd] = printed.split('\\pm').map((v) => Number(v.trim()));
            expect(ours, `${task} ${mechanism}`).toEqual({ mean, sd, source: `Table ${n}` });
          }
        });
      });
    }
    expect([...seen].sort()).toEqual([...TASK_NAMES].sort());
    expect(publishedAccuracy('copy', 'darkformer')).toBeNull();
  });

  it('every method × scale of Table 10, whose Large block is Table 2', () => {
    const [header, ...rows] = tableBlock(text!, 'Table 10');
    expect(header[1]).toBe('Method');
    const relL2Column = header.findIndex((h) => h.startsWith('Rel.'));
    const msColumn = header.findIndex((h) => h.startsWith('Latency'));
    // Rows come in three blocks of seven (Small, Medium, Large), in the order of PUBLISHED_TABLE_10.
    expect(rows).toHaveLength(3 * PUBLISHED_TABLE_10.length);
    rows.forEach((row, i) => {
      const published = PUBLISHED_TABLE_10[i % PUBLISHED_TABLE_10.length];
      const scale = Math.floor(i / PUBLISHED_TABLE_10.length);
      expect(row[1]).toBe(published.paper);
      expect(published.relL2[scale]).toBeCloseTo(Number(row[relL2Column]), 4);
      expect(published.ms[scale]).toBeCloseTo(Number(row[msColumn]), 2);
    });
    const [, ...large] = tableBlock(text!, 'Table 2');
    large.forEach((row, i) => expect(row[0]).toBe(PUBLISHED_TABLE_10[i].paper));
  });
});
