// Training recipes: plain YAML data, validated against one declarative schema (work in progress).

export interface Recipe {
  name: string;
  backend: 'auto' | 'tensorflow' | 'wasm' | 'cpu';
  model: {
    kind: 'gpt' | 'bert';
    dModel: number;
    numLayers: number;
    numHeads: number;
    mlpRatio: number;
    dropout: number;
    maxSeqLen: number;
    bias: boolean;
    attention: { name: string; options: Record<string, unknown> };
  };
  data: {
    dataset: string;
    textColumn: string;
    tokenizer: string;
    seqLen: number;
    shuffleBuffer: number;
    readAhead: number;
    mlmProbability: number;
  };
  train: {
    batchSize: number;
    gradAccum: number;
    optimizer: 'adamw';
    lr: number;
    minLr: number;
    schedule: 'cosine' | 'linear' | 'constant';
    warmupSteps: number;
    weightDecay: number;
    beta1: number;
    beta2: number;
    eps: number;
    decayEmbeddings: boolean;
    clip: number;
    seed: number;
    maxTokens: number | null;
    evalInterval: number;
    evalTokens: number;
    logInterval: number;
    checkpointInterval: number;
    keepCheckpoints: number;
    runDir: string;
  };
  wandb: { enabled: boolean | 'auto'; project: string; entity: string | null; runName: string | null };
}

export function loadRecipe(path: string, overrides: string[] = []): Recipe {
  throw new Error(`${path}: not implemented yet (${overrides.length} overrides)`);
}
