// Which rank of which cluster this process is, from its environment (no tfjs): the variables the
// `--processes N` launcher sets (src/cli/launch.ts), or Slurm's (srun): SLURM_PROCID, SLURM_LOCALID,
// SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE, read in Slurm's own order. TensorFlow's
// SlurmClusterResolver sorts host names as strings, which gives node10 the ranks of node2
// (docs/distributed.md): here the host list is expanded as Slurm writes it and never sorted.
import type { ClusterSpec } from './collective.ts';

/** Set by the launcher for each rank it starts. */
export const RANK_ENV = 'SLAYFORMER_RANK';
export const CLUSTER_ENV = 'SLAYFORMER_CLUSTER';
/** Under Slurm: the first port of a node's ranks (rank with local id i listens on PORT + i); default from the job id. */
export const PORT_ENV = 'SLAYFORMER_PORT';

/** The most hosts one bracket range, or tasks one `(xK)`, expands to (docs/bounds.md): checked before expanding. */
const MAX_EXPANDED = 100_000;

/**
 * Expands a Slurm host list: `node[01-03,7],gpu5` → node01 node02 node03 node7 gpu5 (zero padding
 * kept, Slurm's order kept, several bracket groups as in `rack[1-2]-n[1-2]`).
 */
export function expandHostList(list: string): string[] {
  const hosts: string[] = [];
  for (const item of splitTopLevel(list.trim())) {
    if (item === '') throw new Error(`host list '${list}': an empty host name`);
    hosts.push(...expandHost(item, list));
  }
  return hosts;
}

/** Splits at commas outside brackets. */
function splitTopLevel(text: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '[') depth++;
    else if (text[i] === ']') depth--;
    else if (text[i] === ',' && depth === 0) {
      parts.push(text.slice(start, i));
      start = i + 1;
    }
    if (depth < 0 || depth > 1) throw new Error(`host list '${text}': unbalanced brackets`);
  }
  if (depth !== 0) throw new Error(`host list '${text}': unbalanced brackets`);
  parts.push(text.slice(start));
  return parts;
}

function expandHost(item: string, list: string): string[] {
  const open = item.indexOf('[');
  if (open < 0) return [item];
  const close = item.indexOf(']', open);
  const prefix = item.slice(0, open);
  const values: string[] = [];
  for (const range of item.slice(open + 1, close).split(',')) {
    const match = /^(\d+)(?:-(\d+))?$/.exec(range);
    if (!match) throw new Error(`host list '${list}': '${range}' is not a number or a range`);
    const [, from, to = from] = match;
    const [a, b] = [Number(from), Number(to)];
    if (b < a) throw new Error(`host list '${list}': the range '${range}' runs backwards`);
    if (b - a >= MAX_EXPANDED) throw new Error(`host list '${list}': the range '${range}' holds more than ${MAX_EXPANDED.toLocaleString('en-US')} hosts`);
    for (let n = a; n <= b; n++) values.push(String(n).padStart(from.length, '0'));
  }
  return values.flatMap((v) => expandHost(prefix + v + item.slice(close + 1), list));
}

/** Expands Slurm's tasks per node: `2(x3),1` → [2, 2, 2, 1]. */
export function expandTasksPerNode(text: string): number[] {
  const counts: number[] = [];
  for (const part of text.trim().split(',')) {
    const match = /^(\d+)(?:\(x(\d+)\))?$/.exec(part);
    if (!match) throw new Error(`tasks per node '${text}': '${part}' is not N or N(xK)`);
    const [count, times] = [Number(match[1]), Number(match[2] ?? 1)];
    if (count < 1 || times < 1) throw new Error(`tasks per node '${text}': '${part}' counts no task`);
    if (times > MAX_EXPANDED) throw new Error(`tasks per node '${text}': '${part}' repeats more than ${MAX_EXPANDED.toLocaleString('en-US')} times`);
    for (let i = 0; i < times; i++) counts.push(count);
  }
  return counts;
}

/**
 * The addresses of a Slurm step's tasks, rank order: Slurm's default (block) distribution gives node
 * 0 ranks 0…k0−1, node 1 the next k1, and so on; a node's i-th task listens on `basePort + i`.
 */
export function slurmAddresses(nodeList: string, tasksPerNode: string, basePort: number): string[] {
  const hosts = expandHostList(nodeList);
  const counts = expandTasksPerNode(tasksPerNode);
  if (hosts.length !== counts.length)
    throw new Error(`Slurm step: ${hosts.length} hosts in '${nodeList}' but ${counts.length} task counts in '${tasksPerNode}'`);
  return hosts.flatMap((host, n) => Array.from({ length: counts[n] }, (_, i) => `${host}:${basePort + i}`));
}

/** A node's first port under Slurm: $SLAYFORMER_PORT, else one derived from the job id so that jobs sharing a node differ. */
function slurmBasePort(env: NodeJS.ProcessEnv): number {
  if (env[PORT_ENV]) {
    const port = Number(env[PORT_ENV]);
    if (!Number.isInteger(port) || port < 1024 || port > 65000) throw new Error(`${PORT_ENV}=${env[PORT_ENV]}: expected a port from 1024 to 65000`);
    return port;
  }
  return 15000 + (Number(env.SLURM_JOB_ID ?? 0) % 1000) * 50;
}

/**
 * This process's place in a run across processes, from its environment; null when it runs alone.
 * The launcher's variables first; else a Slurm step of more than one task.
 */
export function clusterFromEnv(env: NodeJS.ProcessEnv = process.env): ClusterSpec | null {
  if (env[RANK_ENV] !== undefined) {
    const addresses = (env[CLUSTER_ENV] ?? '').split(',').filter(Boolean);
    return { rank: Number(env[RANK_ENV]), addresses };
  }
  const tasks = Number(env.SLURM_STEP_NUM_TASKS ?? env.SLURM_NTASKS ?? 1);
  if (env.SLURM_PROCID === undefined || !(tasks > 1)) return null;
  const nodeList = env.SLURM_STEP_NODELIST ?? env.SLURM_JOB_NODELIST;
  const perNode = env.SLURM_STEP_TASKS_PER_NODE ?? env.SLURM_TASKS_PER_NODE;
  if (!nodeList || !perNode) throw new Error('Slurm step of several tasks without SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE');
  const addresses = slurmAddresses(nodeList, perNode, slurmBasePort(env));
  const rank = Number(env.SLURM_PROCID);
  if (addresses.length !== tasks) throw new Error(`Slurm step: ${tasks} tasks but ${addresses.length} in '${nodeList}' × '${perNode}'`);
  // A cyclic or arbitrary distribution puts ranks elsewhere than the block order computed here.
  const own = addresses[rank];
  const expected = env.SLURMD_NODENAME ? `${env.SLURMD_NODENAME}:${slurmBasePort(env) + Number(env.SLURM_LOCALID ?? 0)}` : own;
  if (own !== expected)
    throw new Error(`Slurm task ${rank} runs on ${expected} but the block distribution puts it at ${own}: start the step with srun --distribution=block`);
  return { rank, addresses };
}
