// npm run train -- recipes/x.yaml [--section.key=value …] [--backend NAME] [--dry-run] [--resume auto|<folder>]   (also npm run finetune)
// Everything that loads TensorFlow.js is imported inside main(), after the arguments are parsed: --help and
// usage errors answer at once (0.2 s instead of 1–6 s), before any backend loads.
import path from 'node:path';
import type { Recipe } from '../recipe/schema.ts';
import { signalExitCode, TrainingStopped, type StopRequest } from '../train/stop.ts';
import { chooseBackend, resolveBackend, resolveDataParallel, type BackendDecision } from '../backend/device.ts';
import { clusterFromEnv } from '../backend/cluster-env.ts';
import { machineRanksProblem, thisMachine } from '../backend/machine-ranks.ts';
import { MAX_RANKS } from '../core/bounds.ts';
import { writeLastWords } from '../backend/quiet-stderr.ts';
import { backendOption, startBackend, VERBOSE_OPTION } from './backend-option.ts';
import { runCommand } from './command.ts';
import { ignoreOutputErrors, watchLauncher } from '../core/launcher-channel.ts';

const COMMAND = {
  name: 'train',
  usage: '<recipe.yaml> [--section.key=value …] [--backend NAME] [--dry-run] [--resume auto|<folder>] [--processes N [--oversubscribe]]',
  description: `Trains the recipe from scratch: one epoch over data.dataset (or train.maxTokens tokens), progress lines
on stdout, records in <train.runDir>/<name>-<timestamp>/metrics.jsonl, final weights in …/final/.

  --section.key=value   override a recipe key, e.g. --train.lr=3e-4 --model.attention.options.prfFeatures=32`,
  options: {
    backend: backendOption("the recipe's backend"),
    verbose: VERBOSE_OPTION,
    'dry-run': {
      type: 'boolean',
      help: 'resolve the recipe, build the model plan and print parameters, tokens per epoch, steps and a memory estimate; no training (dataset and tokenizer may be missing)',
    },
    processes: {
      type: 'string',
      value: 'N',
      help: 'one run across N processes on this machine (train.processes; tensorflow backend): each rank trains on its shard of every batch and one all-reduce per step sums the gradients; rank 0 logs, evaluates and checkpoints (docs/distributed.md)',
    },
    oversubscribe: {
      type: 'boolean',
      help: 'start the --processes ranks even when they are more than this machine holds (2 per core, ~0.6 GB of available memory each)',
    },
    resume: {
      type: 'string',
      value: 'WHAT',
      help: "continue a run exactly from a checkpoint in its own run folder: 'auto' = the newest complete checkpoint of the newest run folder of this recipe's name under train.runDir that has one; or a run folder (its newest checkpoint) or a checkpoint folder (<run>/checkpoints/step-NNNNNN; one outside a run continues in a new run folder)",
    },
  },
  positionals: { min: 1, max: 1, name: '<recipe.yaml>' },
  overrides: true,
  notes: `Finetuning (npm run finetune -- <recipe.yaml> is the same command): a recipe with initFrom: <model folder>
(a run's final/, a checkpoint, a run folder, or auto:<recipe name> = the newest finished run of that recipe)
starts from those weights, possibly with another model.attention; train.freeze: all-but-qkv trains only the
q/k/v projections and the mechanism's own parameters. Example: recipes/demo/finetune-darkformer.yaml.

Checkpoints go to <run>/checkpoints/step-NNNNNN/ every train.checkpointInterval steps and at the end.
SIGINT/SIGTERM (Ctrl-C), and SIGHUP (a closed terminal): the current step finishes, a checkpoint is saved, and
the command to resume is printed (exit status 130/143/129); a second signal quits at once. With --processes N,
rank 0 saves the checkpoint and every rank stops, also when the launcher itself is killed; under srun (several
tasks) each task is a rank (docs/distributed.md).

Exit status: 0 done, 1 runtime error, 2 bad recipe or arguments.`,
} as const;

interface Args {
  recipe: string;
  overrides: string[];
  backend: string | undefined;
  verbose: boolean;
  dryRun: boolean;
  resume: string | undefined;
  processes: string | undefined;
  oversubscribe: boolean;
}

const MB = 1024 * 1024;
const fmt = (n: number) => n.toLocaleString('en-US');

/** Prints the plan; 1 when the run would refuse its dataset (the reason on stderr, as the run prints it), else 0. */
async function dryRun(recipe: Recipe, file: string, backend: BackendDecision): Promise<number> {
  const [{ planRun }, { resolveModelSource }, { modelFlops }] = await Promise.all([
    import('../train/plan.ts'),
    import('../store/resolve.ts'),
    import('../model/flops.ts'),
  ]);
  // The device the run would get, resolved without loading it.
  const device = resolveBackend(backend.choice);
  // Counting parameters builds the attention mechanisms' small buffers: the cpu backend suffices and
  // works everywhere (a GPU recipe's 'tensorflow' backend need not be installed for a dry run).
  await startBackend(COMMAND.name, { flag: 'cpu' }, { silent: true });
  const plan = await planRun(recipe);
  const m = plan.modelConfig;
  const options = JSON.stringify(m.attention.options);
  const groups = Object.entries(plan.parameters.byGroup)
    .filter(([, n]) => n > 0)
    .map(([g, n]) => `${g} ${fmt(n)}`)
    .join(', ');
  const out = [
    `recipe      ${file} (name ${recipe.name})`,
    `backend     ${device.backend} (${describeDecision(backend)}): ${device.source}; not started by --dry-run`,
    `model       ${m.kind}: ${m.numLayers} layers, dModel ${m.dModel}, ${m.numHeads} heads, MLP ${m.mlpRatio}×, dropout ${m.dropout}, attention ${m.attention.name} ${options}`,
    `vocab       ${fmt(m.vocabSize)} (${plan.vocabSource})`,
    `parameters  ${fmt(plan.parameters.total)} (${groups})`,
  ];
  if (recipe.initFrom !== null || recipe.train.freeze !== 'none') {
    const choice = recipe.initFrom === null ? null : resolveModelSource('initFrom', recipe.initFrom, { runDir: recipe.train.runDir });
    const from = choice === null ? 'no initFrom' : `initFrom ${choice.format === 'hf' ? recipe.initFrom : choice.dir}`;
    out.push(`finetune    ${from}; train.freeze ${JSON.stringify(recipe.train.freeze)}`);
    if (choice?.reason) out.push(`            ${choice.reason}`);
  }
  const { batchSize, gradAccum } = recipe.train;
  if (plan.epoch) {
    out.push(
      `data        tokens per epoch ${fmt(plan.epoch.tokens)} (${plan.epoch.exact ? 'exact' : 'estimated'}) = ${fmt(plan.epoch.batches)} batches of ${batchSize} sequences × ${recipe.data.seqLen} tokens`,
    );
  } else {
    out.push(`data        ${plan.datasetNote}`);
  }
  const budget = recipe.train.maxTokens === null ? 'one epoch' : `train.maxTokens ${fmt(recipe.train.maxTokens)}`;
  out.push(
    plan.totalSteps === null
      ? `steps       unknown (${budget}; ${fmt(plan.tokensPerStep)} tokens per optimizer step)`
      : `steps       ${fmt(plan.totalSteps)} optimizer steps of ${fmt(plan.tokensPerStep)} tokens (batchSize ${batchSize} × gradAccum ${gradAccum} × seqLen ${recipe.data.seqLen}; ${budget})`,
  );
  const { dataParallel } = recipe.train;
  if (dataParallel !== 1) {
    out.push(
      `replicas    ${resolveDataParallel(dataParallel, device, batchSize)} on ${device.backend} (train.dataParallel ${dataParallel}): each holds the weights and its share of the activations`,
    );
  }
  const flops = modelFlops(m, recipe.data.seqLen, m.kind === 'bert' ? recipe.data.mlmProbability : 1).perToken;
  const runFlops = plan.totalSteps === null ? '' : `; ${(flops * plan.totalSteps * plan.tokensPerStep).toExponential(2)} for the run`;
  out.push(`flops       ${(flops / 1e6).toFixed(1)} M per trained token, forward and backward${runFlops} (docs/training.md, "Model FLOPs and MFU")`);
  const mem = plan.memory;
  out.push(
    `memory      ≈ ${fmt(Math.round(mem.total / MB))} MiB = parameters+gradients+AdamW m,v ${fmt(Math.round(mem.state / MB))} MiB (16 bytes × parameters${gradAccum > 1 ? ' + 4 for accumulation' : ''})` +
      ` + activations ${fmt(Math.round(mem.activations / MB))} MiB (4 bytes × [B·L·(18d + 2·mlpRatio·d)·layers + B·H·L²·3·layers for O(L²) attention + 3·rows·V for the head])`,
  );
  for (const warning of plan.warnings) out.push(`warning     ${warning}`);
  console.log(out.join('\n'));
  if (plan.datasetRefusal === null) return 0;
  console.error(`train: ${plan.datasetRefusal}`);
  return 1;
}

/** Who chose the backend: "--backend cpu", "SLAYFORMER_BACKEND=tensorflow", "recipe: auto". */
function describeDecision({ choice, from }: BackendDecision): string {
  return from === '--backend' ? `--backend ${choice}` : from === 'recipe' ? `recipe: ${choice}` : from === 'default' ? choice : `${from}=${choice}`;
}

async function main(args: Args): Promise<number> {
  const [{ loadRecipe }, { RecipeError }, { validateRecipeModel }, { resolveModelSource }] = await Promise.all([
    import('../store/recipes.ts'),
    import('../recipe/load.ts'),
    import('../train/plan.ts'),
    import('../store/resolve.ts'),
  ]);
  let recipe: Recipe;
  try {
    recipe = loadRecipe(args.recipe, args.overrides);
  } catch (err) {
    console.error(err instanceof RecipeError ? err.message : `train: ${(err as Error).message}`);
    return 2;
  }
  try {
    validateRecipeModel(recipe);
  } catch (err) {
    console.error(`${args.recipe}: ${(err as Error).message}`);
    return 2;
  }
  let backend: BackendDecision;
  try {
    backend = chooseBackend({ flag: args.backend, recipe: recipe.backend });
  } catch (err) {
    console.error(`train: ${(err as Error).message}`);
    return 2;
  }
  let processes = recipe.train.processes;
  if (args.processes !== undefined) {
    processes = Number(args.processes);
    if (!Number.isInteger(processes) || processes < 1 || processes > MAX_RANKS) {
      console.error(`train: --processes ${args.processes}: expected an integer from 1 to ${MAX_RANKS}`);
      return 2;
    }
  }
  let cluster: import('../backend/collective.ts').ClusterSpec | null;
  try {
    cluster = clusterFromEnv();
    // A rank of the --processes launcher stops when the launcher is gone (src/core/launcher-channel.ts): at once
    // until stopOnSignals says how to stop with a checkpoint.
    const launcher = watchLauncher(() => onLauncherGone(launcher!));
  } catch (err) {
    console.error(`train: ${(err as Error).message}`);
    return 2;
  }
  if (!args.dryRun && !cluster && processes > 1) {
    const problem = args.oversubscribe ? null : machineRanksProblem(processes, thisMachine(), args.processes === undefined ? 'train.processes' : '--processes');
    if (problem) {
      console.error(`train: ${problem}`);
      return 2;
    }
    const { launchRanks } = await import('./launch.ts');
    return launchRanks(processes, process.argv.slice(2));
  }
  if (args.dryRun) {
    try {
      return await dryRun(recipe, args.recipe, backend);
    } catch (err) {
      // Model-shape errors (e.g. dModel not divisible by numHeads) are recipe errors too.
      console.error(`${args.recipe}: ${(err as Error).message}`);
      return 2;
    }
  }
  try {
    const resume =
      args.resume === undefined ? undefined : resolveModelSource('resume', args.resume, { runDir: recipe.train.runDir, recipeName: recipe.name }).dir;
    const device = await startBackend(COMMAND.name, { flag: backend.choice }, { verbose: args.verbose, silent: (cluster?.rank ?? 0) !== 0 });
    // Before the model or any tensor exists: joining renames the devices (backend/collective.ts).
    const joined = cluster ? (await import('../backend/collective.ts')).joinCluster(cluster, { joinTimeoutS: recipe.train.joinTimeout }) : null;
    const { runTraining } = await import('../train/trainer.ts');
    const { stop, remove } = stopOnSignals(joined);
    try {
      await runTraining(recipe, { resume, stop, device, cluster: joined });
    } finally {
      remove();
    }
    return 0;
  } catch (err) {
    if (err instanceof TrainingStopped) {
      console.error(`train: ${err.message}\nresume with: ${resumeCommand(args, err.checkpointDir)}`);
      return signalExitCode(err.signal);
    }
    // The error is the last line: what TensorFlow says after it (the report below, the exit) only echoes it.
    writeLastWords(`train: ${(err as Error).message}\n${process.env.SLAYFORMER_DEBUG ? `${(err as Error).stack}\n` : ''}`);
    // The other ranks' collectives fail at once, quoting this error, rather than after the heartbeat timeout.
    const { currentCluster, reportFailureToCluster } = await import('../backend/collective.ts');
    const joined = currentCluster();
    if (joined) reportFailureToCluster(joined, err);
    return 1;
  }
}

/** The exact command that continues from `checkpointDir` (same recipe, overrides and backend). */
function resumeCommand(args: Args, checkpointDir: string): string {
  const quote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);
  const relative = path.relative(process.cwd(), checkpointDir);
  const parts = [
    args.recipe,
    ...args.overrides,
    ...(args.backend ? ['--backend', args.backend] : []),
    ...(args.processes ? ['--processes', args.processes] : []),
    ...(args.oversubscribe ? ['--oversubscribe'] : []),
    '--resume',
    relative.startsWith('..') ? checkpointDir : relative,
  ];
  return `npm run train -- ${parts.map(quote).join(' ')}`;
}

/** What a rank does when its launcher is gone: before training there is nothing to save, and it ends at once. */
let onLauncherGone: (launcherPid: number) => void = (launcherPid) => {
  ignoreOutputErrors();
  console.error(`train: the launcher (pid ${launcherPid}) is gone before training began: stopping, nothing saved`);
  process.exit(143);
};

/**
 * SIGINT/SIGTERM/SIGHUP ask the loop to stop after the current step and save a checkpoint; a second one quits at once.
 * The end of the --processes launcher asks it as SIGTERM does. Returns the request the loop reads (none on the ranks
 * other than 0) and the removal of the handlers.
 */
function stopOnSignals(cluster: import('../backend/collective.ts').Cluster | null): { stop?: StopRequest; remove: () => void } {
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  if (cluster && cluster.rank !== 0) {
    // Rank 0 alone checkpoints on a signal (srun passes Ctrl-C to every task); the others end when it does, having
    // given their part of the checkpoint, also when the launcher is gone.
    const ignore = () => ignoreOutputErrors();
    for (const signal of signals) process.on(signal, ignore);
    onLauncherGone = ignore;
    return { remove: () => {} };
  }
  const stop: StopRequest = { signal: null };
  const onSignal = (signal: NodeJS.Signals) => {
    // A closed terminal (SIGHUP) takes the output with it: a failed write must not end the run before its checkpoint.
    if (signal === 'SIGHUP') ignoreOutputErrors();
    if (stop.signal) {
      console.error(`train: second ${signal}: quitting without a checkpoint`);
      process.exit(signalExitCode(signal));
    }
    stop.signal = signal;
    console.error(`train: ${signal} received: finishing the current step and saving a checkpoint (send it again to quit at once)`);
  };
  for (const signal of signals) process.on(signal, onSignal);
  // Not a second signal: a run already stopping (Ctrl-C, then the launcher killed) goes on to its checkpoint.
  onLauncherGone = (launcherPid) => {
    ignoreOutputErrors();
    if (stop.signal) return;
    stop.signal = 'SIGTERM';
    console.error(`train: the launcher (pid ${launcherPid}) is gone: finishing the current step and saving a checkpoint, as on SIGTERM`);
  };
  return { stop, remove: () => signals.forEach((signal) => process.off(signal, onSignal)) };
}

await runCommand(COMMAND, ({ values, positionals, overrides }) =>
  main({
    recipe: positionals[0],
    overrides,
    backend: values.backend,
    verbose: values.verbose,
    dryRun: values['dry-run'],
    resume: values.resume,
    processes: values.processes,
    oversubscribe: values.oversubscribe,
  }),
);
