// Which rank of which cluster this process is, from its environment (no tfjs): the variables the
// `--processes N` launcher sets (src/cli/launch.ts), or Slurm's (srun): SLURM_PROCID, SLURM_LOCALID,
// SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE, read in Slurm's own order. TensorFlow's
// SlurmClusterResolver sorts host names as strings, which gives node10 the ranks of node2
// (docs/distributed.md): here the host list is expanded as Slurm writes it and never sorted.
import { MAX_RANKS } from '../core/bounds.ts';
import type { ClusterSpec } from './collective.ts';

/** Set by the launcher for each rank it starts. */
export const RANK_ENV = 'SLAYFORMER_RANK';
export const CLUSTER_ENV = 'SLAYFORMER_CLUSTER';
/** Under Slurm: the first port of a node's ranks (rank with local id i listens on PORT + i); default from the job id. */
export const PORT_ENV = 'SLAYFORMER_PORT';

/**
 * host:port of jax's coordination service for the ranks of an xla-executor run (docs/xla.md, "Several devices"). The
 * launcher sets it to a free port of its own; else (srun) rank 0's host at the port after its node's ranks' ports.
 */
export const XLA_COORDINATOR_ENV = 'SLAYFORMER_XLA_COORDINATOR';

/** A value as an error quotes it: cut to a line (a hostile variable may be any length). */
const cut = (value: string) => (value.length > 120 ? `${value.slice(0, 120)}…` : value);

/** `count` over the most ranks of one run, as an error says it (docs/bounds.md); null when within. */
function beyondRanks(where: string, count: bigint, what: string): string | null {
  if (count <= BigInt(MAX_RANKS)) return null;
  return `${where}: ${count.toLocaleString('en-US')} ${what}, more than the ${MAX_RANKS.toLocaleString('en-US')} ranks one run may have (docs/bounds.md)`;
}

/** A host name cut into literal text and bracket groups, each group its ranges with their digit widths. */
type HostPattern = (string | { from: bigint; to: bigint; width: number }[])[];

/**
 * Expands a Slurm host list: `node[01-03,7],gpu5` → node01 node02 node03 node7 gpu5 (zero padding
 * kept, Slurm's order kept, several bracket groups as in `rack[1-2]-n[1-2]`). The hosts are counted
 * first, exactly (BigInt), and a list of more than the most ranks of one run is refused before any is listed:
 * every host of a step runs at least one task. `name` is the variable the list came from, for errors.
 */
export function expandHostList(list: string, name?: string): string[] {
  const where = name ? `${name}=${cut(list)}` : `host list '${cut(list)}'`;
  const patterns = splitTopLevel(list.trim(), where).map((item) => hostPattern(item, where));
  let total = 0n;
  for (const pattern of patterns) {
    let count = 1n;
    for (const part of pattern) if (typeof part !== 'string') count *= part.reduce((sum, r) => sum + r.to - r.from + 1n, 0n);
    total += count;
  }
  const problem = beyondRanks(where, total, 'hosts');
  if (problem) throw new Error(problem);
  return patterns.flatMap(expandPattern);
}

/** Splits at commas outside brackets. */
function splitTopLevel(text: string, where: string): string[] {
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
    if (depth < 0 || depth > 1) throw new Error(`${where}: unbalanced brackets`);
  }
  if (depth !== 0) throw new Error(`${where}: unbalanced brackets`);
  parts.push(text.slice(start));
  return parts;
}

function hostPattern(item: string, where: string): HostPattern {
  if (item === '') throw new Error(`${where}: an empty host name`);
  const pattern: HostPattern = [];
  for (const piece of item.split(/(\[[^\]]*\])/)) {
    if (!piece.startsWith('[')) {
      if (piece) pattern.push(piece);
      continue;
    }
    pattern.push(
      piece
        .slice(1, -1)
        .split(',')
        .map((range) => {
          const match = /^(\d+)(?:-(\d+))?$/.exec(range);
          if (!match) throw new Error(`${where}: '${range}' is not a number or a range`);
          const [, from, to = from] = match;
          if (BigInt(to) < BigInt(from)) throw new Error(`${where}: the range '${range}' runs backwards`);
          return { from: BigInt(from), to: BigInt(to), width: from.length };
        }),
    );
  }
  return pattern;
}

/** The hosts of one pattern, the first bracket group varying slowest, as Slurm lists them. */
function expandPattern(pattern: HostPattern): string[] {
  let names = [''];
  for (const part of pattern) {
    if (typeof part === 'string') {
      names = names.map((n) => n + part);
      continue;
    }
    const values: string[] = [];
    for (const { from, to, width } of part) for (let n = from; n <= to; n++) values.push(n.toString().padStart(width, '0'));
    names = names.flatMap((n) => values.map((v) => n + v));
  }
  return names;
}

/**
 * Expands Slurm's tasks per node: `2(x3),1` → [2, 2, 2, 1]. The tasks are counted first, exactly, and more than
 * the most ranks of one run are refused before any is listed. `name` is the variable the text came from, for errors.
 */
export function expandTasksPerNode(text: string, name?: string): number[] {
  const where = name ? `${name}=${cut(text)}` : `tasks per node '${cut(text)}'`;
  const parts = text
    .trim()
    .split(',')
    .map((part) => {
      const match = /^(\d+)(?:\(x(\d+)\))?$/.exec(part);
      if (!match) throw new Error(`${where}: '${part}' is not N or N(xK)`);
      const [count, times] = [BigInt(match[1]), BigInt(match[2] ?? 1)];
      if (count < 1n || times < 1n) throw new Error(`${where}: '${part}' counts no task`);
      return { count, times };
    });
  const problem = beyondRanks(
    where,
    parts.reduce((sum, { count, times }) => sum + count * times, 0n),
    'tasks',
  );
  if (problem) throw new Error(problem);
  return parts.flatMap(({ count, times }) => Array<number>(Number(times)).fill(Number(count)));
}

/**
 * The addresses of a Slurm step's tasks, rank order: Slurm's default (block) distribution gives node
 * 0 ranks 0…k0−1, node 1 the next k1, and so on; a node's i-th task listens on `basePort + i`.
 * `names`: the variables the two lists came from, for errors.
 */
export function slurmAddresses(nodeList: string, tasksPerNode: string, basePort: number, names: [string, string] | [] = []): string[] {
  const hosts = expandHostList(nodeList, names[0]);
  const counts = expandTasksPerNode(tasksPerNode, names[1]);
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

/** Where the ranks' jax processes meet: $SLAYFORMER_XLA_COORDINATOR, else the port after rank 0's node's ranks' ports. */
export function xlaCoordinator(spec: ClusterSpec, env: NodeJS.ProcessEnv = process.env): string {
  const given = env[XLA_COORDINATOR_ENV];
  if (given) return given;
  const hostOf = (address: string) => address.slice(0, address.lastIndexOf(':'));
  const first = spec.addresses[0];
  const onFirstHost = spec.addresses.filter((a) => hostOf(a) === hostOf(first)).length;
  return `${hostOf(first)}:${Number(first.slice(first.lastIndexOf(':') + 1)) + onFirstHost}`;
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
  const listName = env.SLURM_STEP_NODELIST !== undefined ? 'SLURM_STEP_NODELIST' : 'SLURM_JOB_NODELIST';
  const perNodeName = env.SLURM_STEP_TASKS_PER_NODE !== undefined ? 'SLURM_STEP_TASKS_PER_NODE' : 'SLURM_TASKS_PER_NODE';
  const [nodeList, perNode] = [env[listName], env[perNodeName]];
  if (!nodeList || !perNode) throw new Error('Slurm step of several tasks without SLURM_STEP_NODELIST and SLURM_STEP_TASKS_PER_NODE');
  const addresses = slurmAddresses(nodeList, perNode, slurmBasePort(env), [listName, perNodeName]);
  const rank = Number(env.SLURM_PROCID);
  if (addresses.length !== tasks) throw new Error(`Slurm step: ${tasks} tasks but ${addresses.length} in '${nodeList}' × '${perNode}'`);
  if (!Number.isInteger(rank) || rank < 0 || rank >= tasks)
    throw new Error(`SLURM_PROCID=${cut(env.SLURM_PROCID)}: not a rank of the step's ${tasks} tasks (0 to ${tasks - 1})`);
  // A cyclic or arbitrary distribution puts ranks elsewhere than the block order computed here.
  const own = addresses[rank];
  const expected = env.SLURMD_NODENAME ? `${env.SLURMD_NODENAME}:${slurmBasePort(env) + Number(env.SLURM_LOCALID ?? 0)}` : own;
  if (own !== expected)
    throw new Error(`Slurm task ${rank} runs on ${expected} but the block distribution puts it at ${own}: start the step with srun --distribution=block`);
  return { rank, addresses };
}
