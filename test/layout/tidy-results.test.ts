// tf.tidy walks whatever its function returns, looking for tensors to keep: a typed array is walked index by
// index, ~1 s for a million floats. Returning `x.dataSync()` from a tidy cost `npm run bench:distributed` its
// all-reduce figure (docs/distributed.md, "Measured here"): read values back after the tidy instead.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..', '..');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : [],
  );
}

/** The expressions a function returns: an arrow's expression body, or its own return statements (not nested functions'). */
function returned(fn: ts.ArrowFunction | ts.FunctionExpression): ts.Expression[] {
  if (!ts.isBlock(fn.body)) return [fn.body];
  const found: ts.Expression[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node)) return;
    if (ts.isReturnStatement(node) && node.expression) found.push(node.expression);
    ts.forEachChild(node, visit);
  };
  ts.forEachChild(fn.body, visit);
  return found;
}

const READS = new Set(['dataSync', 'arraySync']);

/** `file:line` of every tidy whose function returns values read back: `x.dataSync()` or `x.arraySync()` as such. */
function tidiesReturningValues(file: string, text = readFileSync(file, 'utf8')): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const hits: string[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isCallExpression(node)) {
      const callee = node.expression;
      const name = ts.isPropertyAccessExpression(callee) ? callee.name.text : ts.isIdentifier(callee) ? callee.text : '';
      const fn = node.arguments.at(-1);
      if (name === 'tidy' && fn && (ts.isArrowFunction(fn) || ts.isFunctionExpression(fn))) {
        for (const expression of returned(fn)) {
          const inner = ts.isParenthesizedExpression(expression) ? expression.expression : expression;
          if (ts.isCallExpression(inner) && ts.isPropertyAccessExpression(inner.expression) && READS.has(inner.expression.name.text)) {
            const { line } = source.getLineAndCharacterOfPosition(inner.getStart());
            hits.push(`${path.relative(ROOT, file)}:${line + 1}`);
          }
        }
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return hits;
}

describe('tf.tidy results', () => {
  it('no tidy in src/ or bench/ returns values read back (dataSync, arraySync)', () => {
    const hits = ['src', 'bench'].flatMap((dir) => sources(path.join(ROOT, dir))).flatMap((file) => tidiesReturningValues(file));
    expect(hits).toEqual([]);
  });

  it('finds one in an arrow expression and in a return statement, not in a nested function or an indexed read', () => {
    const file = path.join(ROOT, 'probe.ts');
    const text = [
      'tf.tidy(() => x.dataSync());',
      'tidy(() => { const y = f(); return (y.arraySync()); });',
      'tf.tidy(() => x.dataSync()[0]);',
      'tf.tidy(() => { const read = () => x.dataSync(); return g(read); });',
    ].join('\n');
    expect(tidiesReturningValues(file, text)).toEqual(['probe.ts:1', 'probe.ts:2']);
  });
});
