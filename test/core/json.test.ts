// core/json.ts: the one isRecord, JSON file reader, canonical text, setPath and flattenPaths the project shares.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { canonicalJson, flattenPaths, isRecord, readJsonFile, readJsonObject, setPath } from '../../src/core/json.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'slayformer-json-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('canonicalJson', () => {
  it('gives equal values equal text whatever their key order, and different values different text', () => {
    const a = { train: { lr: 0.001, seed: 1 }, model: { attention: { name: 'slay', options: { b: [1, 2], a: null } } } };
    const b = { model: { attention: { options: { a: null, b: [1, 2] }, name: 'slay' } }, train: { seed: 1, lr: 0.001 } };
    expect(canonicalJson(a)).toBe(canonicalJson(b));
    expect(canonicalJson(a)).toBe('{"model":{"attention":{"name":"slay","options":{"a":null,"b":[1,2]}}},"train":{"lr":0.001,"seed":1}}');
    expect(canonicalJson({ ...a, train: { lr: 0.001, seed: 2 } })).not.toBe(canonicalJson(a));
    // Lists keep their order: [1, 2] is not [2, 1].
    expect(canonicalJson([1, 2])).not.toBe(canonicalJson([2, 1]));
  });

  it('leaves out undefined properties as a JSON file would, and tells a missing value from every JSON value', () => {
    expect(canonicalJson({ seed: undefined, lr: 1 })).toBe(canonicalJson(JSON.parse(JSON.stringify({ seed: undefined, lr: 1 }))));
    expect(canonicalJson([undefined])).toBe(JSON.stringify([undefined]));
    expect(canonicalJson(undefined)).toBe('undefined');
    for (const value of [null, 'undefined', 0, false, {}]) expect(canonicalJson(value)).not.toBe(canonicalJson(undefined));
  });
});

describe('paths into mappings', () => {
  it('setPath makes the mappings on the way, replacing a value that is not one', () => {
    const target: Record<string, unknown> = { train: { lr: 1 }, model: 'x' };
    setPath(target, 'train.seed', 2);
    setPath(target, 'model.attention.name', 'slay');
    setPath(target, 'name', 'run');
    expect(target).toEqual({ train: { lr: 1, seed: 2 }, model: { attention: { name: 'slay' } }, name: 'run' });
  });

  it('flattenPaths gives dotted paths (dotted keys read as nested ones), stops where told, keeps empty mappings and lists as values', () => {
    const nested = {
      train: { lr: 1, seed: undefined },
      'data.seqLen': 8,
      model: { attention: { name: 'slay', options: { prf: { m: 4 } } }, layers: [1, 2] },
      wandb: {},
    };
    expect(flattenPaths(nested)).toEqual({
      'train.lr': 1,
      'data.seqLen': 8,
      'model.attention.name': 'slay',
      'model.attention.options.prf.m': 4,
      'model.layers': [1, 2],
      wandb: {},
    });
    expect(flattenPaths(nested, (p) => p === 'model.attention.options')['model.attention.options']).toEqual({ prf: { m: 4 } });
    // setPath undoes it.
    const back: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(flattenPaths(nested))) setPath(back, key, value);
    expect(flattenPaths(back)).toEqual(flattenPaths(nested));
  });

  it('isRecord: a plain object, not null or a list', () => {
    expect([{}, { a: 1 }].map(isRecord)).toEqual([true, true]);
    expect([null, [], 'x', 1, undefined].map(isRecord)).toEqual([false, false, false, false, false]);
  });
});

describe('reading JSON files', () => {
  it('readJsonFile names the file and what is wrong, and takes the caller’s error class', () => {
    const good = path.join(dir, 'good.json');
    writeFileSync(good, '{"a": [1]}');
    expect(readJsonFile(good)).toEqual({ a: [1] });
    const broken = path.join(dir, 'broken.json');
    writeFileSync(broken, '{"a": ');
    expect(() => readJsonFile(broken)).toThrow(new RegExp(`^${broken}: not valid JSON \\(`));
    const missing = path.join(dir, 'missing.json');
    expect(() => readJsonFile(missing)).toThrow(`${missing}: cannot be read (ENOENT)`);
    class OwnError extends Error {}
    expect(() => readJsonFile(missing, (problem) => new OwnError(problem))).toThrow(OwnError);
  });

  it('readJsonObject: undefined for a missing, broken or non-object file', () => {
    const list = path.join(dir, 'list.json');
    writeFileSync(list, '[1]');
    const object = path.join(dir, 'object.json');
    writeFileSync(object, '{"step": 3}');
    expect(readJsonObject(object)).toEqual({ step: 3 });
    expect(readJsonObject(list)).toBeUndefined();
    expect(readJsonObject(path.join(dir, 'broken.json'))).toBeUndefined();
    expect(readJsonObject(path.join(dir, 'nothing.json'))).toBeUndefined();
  });
});
