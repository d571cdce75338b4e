// Helpers for tests that build attention modules and run them on plain arrays.
import * as tf from '@tensorflow/tfjs';
import { createAttention } from '../../src/model/attention/registry.ts';
import type { AttentionModule } from '../../src/model/attention/types.ts';
import { tensor4, toArray4, type Array4 } from './reference.ts';

/** module.apply on [B][H][L][D] arrays, inside a tidy. */
export function runAttention(module: AttentionModule, q: Array4, k: Array4, v: Array4): Array4 {
  return tf.tidy(() => toArray4(module.apply(tensor4(q), tensor4(k), tensor4(v))));
}

/** createAttention that remembers what it built; call disposeAll() in afterEach. */
export function attentionTracker<Base extends AttentionModule>() {
  const created: Base[] = [];
  return {
    create<T extends Base>(name: string, options: Record<string, unknown> & { numHeads: number; headDim: number }): T {
      const module = createAttention(name, options) as T;
      created.push(module);
      return module;
    },
    disposeAll(): void {
      for (const m of created.splice(0)) m.dispose();
    },
  };
}
