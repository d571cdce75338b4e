// The README's Results table from results files: a row per experiment (its file, agreement count or claims, wall
// time, provenance; why it has not run where there is no file), written only between the two markers.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EXPERIMENT_NAMES } from '../../src/paper/index.ts';
import { replaceSummaryBlock, summaryLines, SUMMARY_END, SUMMARY_START } from '../../src/paper/summary.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'paper-summary-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function results(name: string, extra: Record<string, unknown>) {
  return {
    experiment: name,
    provenance: { commits: ['0123456789ab'], backends: ['tensorflow (TensorFlow 2.21.0)'], wallSeconds: 3725, units: { total: 10, done: 8, notDone: 2 } },
    counts: { withPublished: 5, agrees: 4, disagrees: 1, notRun: 0, extra: 0, disagreementsBy: { deliberate: 1, 'protocol-gap': 0, open: 0 } },
    ...extra,
  };
}

describe('summaryLines', () => {
  it('has a row per experiment: counts, claims or why it has not run', async () => {
    const resultsDir = path.join(dir, 'docs', 'results');
    mkdirSync(resultsDir, { recursive: true });
    writeFileSync(path.join(resultsDir, 'slay-tasks.json'), JSON.stringify(results('slay-tasks', {})));
    const claims = [
      { statement: 'a', verdict: 'holds', evidence: '' },
      { statement: 'b', verdict: 'not separated', evidence: '' },
    ];
    writeFileSync(path.join(resultsDir, 'darkformer-finetune.json'), JSON.stringify(results('darkformer-finetune', { counts: { withPublished: 0 }, claims })));
    const lines = await summaryLines(resultsDir, dir);
    expect(lines).toHaveLength(2 + EXPERIMENT_NAMES.length);
    const row = (name: string) => lines.find((l) => l.startsWith(`| ${name} |`))!;
    expect(row('slay-tasks')).toBe(
      '| slay-tasks | [docs/results/slay-tasks.md](docs/results/slay-tasks.md) | 4 of 5 cells agree with the paper (1 disagree: 1 deliberate, 0 protocol gap, 0 open; 0 not run); 8 of 10 units done | 1 h 02 min | tensorflow (TensorFlow 2.21.0) at 0123456789ab |',
    );
    expect(row('darkformer-finetune')).toContain('| 1 of 2 claims hold, 1 not separated, 0 contradicted, 0 not run; 8 of 10 units done |');
    expect(row('lm-compare')).toMatch(/\| — \| not run yet: `npm run paper -- lm-compare` \(\d+ units\) \|/);
    expect(row('slay-ablation')).toMatch(/\| — \| not run yet: `npm run paper -- slay-ablation` \(\d+ units\) \|/);
  });

  it('refuses a results file that is not JSON, naming it', async () => {
    const resultsDir = path.join(dir, 'bad');
    mkdirSync(resultsDir, { recursive: true });
    writeFileSync(path.join(resultsDir, 'slay-tasks.json'), '{ not json');
    await expect(summaryLines(resultsDir, dir)).rejects.toThrow(/slay-tasks\.json: not valid JSON/);
  });
});

describe('replaceSummaryBlock', () => {
  it('replaces only what lies between the markers', () => {
    const text = `# T\n\nbefore\n${SUMMARY_START}\nold row\n${SUMMARY_END}\nafter\n`;
    expect(replaceSummaryBlock('README.md', text, ['| a |', '| b |'])).toBe(`# T\n\nbefore\n${SUMMARY_START}\n| a |\n| b |\n${SUMMARY_END}\nafter\n`);
  });
  it('refuses a README whose markers are missing, out of order or repeated', () => {
    expect(() => replaceSummaryBlock('README.md', 'no markers', [])).toThrow(/README\.md: the Results table's markers are missing or repeated/);
    expect(() => replaceSummaryBlock('README.md', `${SUMMARY_END}\n${SUMMARY_START}`, [])).toThrow(/markers/);
    expect(() => replaceSummaryBlock('README.md', `${SUMMARY_START}\n${SUMMARY_START}\n${SUMMARY_END}`, [])).toThrow(/markers/);
  });
});
