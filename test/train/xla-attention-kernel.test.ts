// train.attentionKernel (docs/xla.md, "Attention on the GPU") without jax: the recipe allows fused with the xla
// executor and softmax attention alone (an error naming the field and the fix otherwise); a compiled folder tells the
// two apart; and, on the tensorflow backend, softmax attention recorded as the boundary is one forward and one
// gradient XlaCallModule per layer whose eager values are the composed form's. Filled in by jax and compared with the
// composed program: xla-attention-boundary.test.ts.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { boundaryModule, withAttentionBoundary } from '../../src/backend/attention-boundary.ts';
import { isTensorflowSetUp, SETUP_COMMAND } from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';
import { recordTrace } from '../../src/backend/tf-graph.ts';
import { Rng } from '../../src/core/rng.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { randomBatch } from '../../src/train/throughput.ts';
import { CompiledBook, MANIFEST_FILE, modelTensors } from '../../src/train/xla-recording.ts';
import { tinyGptConfig } from '../helpers/tiny-model.ts';

const withNative = isTensorflowSetUp();
if (!withNative) console.log(`[xla-attention-kernel] the recording skipped: needs the tensorflow backend (${SETUP_COMMAND})`);

const recipeText = (model: string, train: string) => `
model: { kind: gpt, dModel: 16, numLayers: 1, numHeads: 2${model} }
data: { dataset: data, tokenizer: tokenizer.json, seqLen: 16 }
train: { ${train} }
`;

describe('train.attentionKernel', () => {
  it('fused needs train.executor xla and softmax attention: an error naming the field and the fix otherwise', () => {
    const fix = 'set both, or train.attentionKernel: composed';
    expect(() => parseRecipe(recipeText('', 'attentionKernel: fused, executor: functions'), 'r.yaml')).toThrow(
      `train.attentionKernel fused is softmax attention on train.executor xla (this recipe has train.executor functions, model.attention.name softmax): ${fix}`,
    );
    expect(() => parseRecipe(recipeText(', attention: { name: slay }', 'attentionKernel: fused, executor: xla'), 'r.yaml')).toThrow(
      'train.attentionKernel fused is softmax attention on train.executor xla (this recipe has train.executor xla, model.attention.name slay)',
    );
    expect(parseRecipe(recipeText('', 'attentionKernel: fused, executor: xla'), 'r.yaml').train.attentionKernel).toBe('fused');
    expect(parseRecipe(recipeText('', ''), 'r.yaml').train.attentionKernel).toBe('composed');
  });

  it('a compiled folder recorded with the other kernel is an error naming the folder, both and the fix', async () => {
    await initBackend('cpu', { quiet: true });
    const model = createLanguageModel(tinyGptConfig());
    const folder = mkdtempSync(join(tmpdir(), 'slay-xla-attention-kernel-'));
    try {
      const manifest = { format: 1, recipe: 'tiny', tensors: modelTensors(model).map(([n, t]) => [n, t.shape]), programs: [] };
      writeFileSync(join(folder, MANIFEST_FILE), JSON.stringify(manifest));
      // A folder from before train.attentionKernel holds composed programs.
      expect(() => new CompiledBook(folder, model)).not.toThrow();
      expect(() => new CompiledBook(folder, model, { attentionKernel: 'fused' })).toThrow(
        `xla: ${join(folder, MANIFEST_FILE)} was compiled for train.attentionKernel composed, this run asks fused (npm run compile -- <recipe> --train.executor=xla --train.attentionKernel=fused --out <folder> writes programs for it)`,
      );
      writeFileSync(join(folder, MANIFEST_FILE), JSON.stringify({ ...manifest, attentionKernel: 'fused' }));
      expect(() => new CompiledBook(folder, model, { attentionKernel: 'fused' })).not.toThrow();
      expect(() => new CompiledBook(folder, model)).toThrow(/was compiled for train\.attentionKernel fused, this run asks composed/);
    } finally {
      model.dispose();
      rmSync(folder, { recursive: true, force: true });
    }
  });

  it("the boundary's module is one custom call over [B·H, L, D] float32, several results as #i", () => {
    expect(boundaryModule('slayformer.attention_grad', [4, 16, 8], 4, 3, true)).toBe(
      [
        'module @slayformer_attention {',
        '  func.func public @main(%arg0: tensor<4x16x8xf32>, %arg1: tensor<4x16x8xf32>, %arg2: tensor<4x16x8xf32>, %arg3: tensor<4x16x8xf32>) -> (tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) {',
        '    %0:3 = stablehlo.custom_call @slayformer.attention_grad(%arg0, %arg1, %arg2, %arg3) {backend_config = "{\\"causal\\":true}"} : (tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>) -> (tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>)',
        '    return %0#0, %0#1, %0#2 : tensor<4x16x8xf32>, tensor<4x16x8xf32>, tensor<4x16x8xf32>',
        '  }',
        '}',
      ].join('\n'),
    );
  });
});

describe.skipIf(!withNative)('softmax attention recorded as the boundary', () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
  });

  it('each layer is one forward and one gradient XlaCallModule, and the recording computes what the composed form does', () => {
    const model = createLanguageModel(tinyGptConfig({ numLayers: 2 }));
    try {
      const batch = randomBatch(new Rng(3), 'gpt', 2, 16, 61);
      const variables = [...model.parameters().values()];
      const inputs = model.lossInputs(batch)!;
      const recorded = (boundary: boolean) => {
        const run = () => {
          const { value, grads } = tf.variableGrads(() => model.lossOf(inputs, null) as tf.Scalar, variables);
          return [value, ...Object.values(grads)];
        };
        const feeds = modelTensors(model).map(([, t]) => t);
        const { outputs, trace } = boundary ? withAttentionBoundary(() => recordTrace(feeds, run)) : recordTrace(feeds, run);
        const modules = trace.ops.filter((o) => o.op === 'XlaCallModule').map((o) => String(o.attrs.find((a) => a.name === 'module')!.value));
        const values = outputs.map((t) => t.dataSync());
        tf.dispose(outputs);
        return { modules, values };
      };
      const composed = recorded(false);
      const boundary = recorded(true);
      expect(composed.modules).toEqual([]);
      expect(boundary.modules.filter((t) => t.includes('@slayformer.attention(')).length).toBe(2);
      expect(boundary.modules.filter((t) => t.includes('@slayformer.attention_grad(')).length).toBe(2);
      expect(boundary.modules[0]).toContain('tensor<4x16x8xf32>');
      expect(boundary.values.length).toBe(composed.values.length);
      boundary.values.forEach((v, i) => {
        const scale = Math.max(...composed.values[i].map(Math.abs));
        v.forEach((x, j) => expect(Math.abs(x - composed.values[i][j])).toBeLessThanOrEqual(1e-5 * scale + 1e-7));
      });
    } finally {
      model.dispose();
    }
  });
});
