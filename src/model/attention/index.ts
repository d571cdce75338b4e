// Importing this module registers every attention mechanism: one import line per mechanism file (adding one:
// docs/attention.md, "Adding a mechanism").
import './softmax.ts';
import './yat-spherical.ts';
import './slay.ts';
import './performer.ts';
import './darkformer.ts';
import './schoenbat.ts';
import './linear-elu.ts';
import './cosformer.ts';
import './gla.ts';

export {
  createAttention,
  attentionTensors,
  attentionNames,
  attentionOptionSpecs,
  attentionDescription,
  attentionIsQuadratic,
  attentionIsCausalOnly,
  attentionKindProblem,
  attentionFeatureMap,
} from './registry.ts';
export type { FeatureMapCost } from './registry.ts';
export type {
  AttentionModule,
  AttentionConfig,
  ApplyOptions,
  AttentionState,
  DocumentLayout,
  KernelEstimate,
  StepOptions,
  TensorDeclaration,
} from './types.ts';
export { linearAttention } from './linear-attention.ts';
export { unfittedImportanceWeights } from './performer.ts';
