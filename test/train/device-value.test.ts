// The device is decided once and handed down: runTraining takes the device its command started
// (src/cli/backend-option.ts startBackend) and records that value — in config.json, env.json and the start line —
// rather than asking the backend module again. The test hands it a cpu device with a source of its own.
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { describeDevice } from '../../src/backend/device.ts';
import { initBackend } from '../../src/backend/start.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { makeTinySetup, tinyRecipeText, type TinySetup } from './checkpoint-fixtures.ts';

let dir: string;
let setup: TinySetup;
beforeAll(async () => {
  await initBackend('cpu', { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-device-value-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

it('runTraining records the device it was handed, not one it asks for', async () => {
  const device = { ...describeDevice('cpu'), source: 'handed down by the test' };
  const recipe = parseRecipe(tinyRecipeText(setup, join(dir, 'runs'), { maxTokens: 192 }).replace('backend: cpu', 'backend: auto'), join(dir, 'tiny.yaml'));
  const lines: string[] = [];
  const write = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => (lines.push(String(chunk)), true));
  let runDir: string;
  try {
    ({ runDir } = await runTraining(recipe, { device }));
  } finally {
    write.mockRestore();
  }
  expect(JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')).backend).toBe('cpu');
  expect(JSON.parse(readFileSync(join(runDir, 'env.json'), 'utf8')).backend).toMatchObject({ name: 'cpu', source: 'handed down by the test' });
  expect(lines.join('')).toMatch(/; backend cpu\b/);
});
