// Which rank of which cluster a process is: Slurm's compressed host lists and task counts expanded in
// Slurm's own order (never sorted as strings, which would give node10 the ranks of node2), the
// launcher's variables, and the ServerDef the ranks are started with.
import { describe, expect, it } from 'vitest';
import { clusterFromEnv, expandHostList, expandTasksPerNode, slurmAddresses, XLA_COORDINATOR_ENV, xlaCoordinator } from '../../src/backend/cluster-env.ts';
import { joinFailure, serverDefText } from '../../src/backend/collective.ts';
import { MAX_RANKS } from '../../src/core/bounds.ts';

describe('Slurm host lists', () => {
  it("expands ranges and lists inside brackets, keeping zero padding and Slurm's order", () => {
    expect(expandHostList('node[01-03,7],gpu5')).toEqual(['node01', 'node02', 'node03', 'node7', 'gpu5']);
    expect(expandHostList('node[9-10]')).toEqual(['node9', 'node10']);
    expect(expandHostList('node10,node9,node2')).toEqual(['node10', 'node9', 'node2']);
    expect(expandHostList('gpu-a[098-101]')).toEqual(['gpu-a098', 'gpu-a099', 'gpu-a100', 'gpu-a101']);
    expect(expandHostList('rack[1-2]-n[01-02]')).toEqual(['rack1-n01', 'rack1-n02', 'rack2-n01', 'rack2-n02']);
    expect(expandHostList('localhost')).toEqual(['localhost']);
  });

  it('refuses what is not a host list, naming it', () => {
    expect(() => expandHostList('node[01-03')).toThrow(/host list 'node\[01-03': unbalanced brackets/);
    expect(() => expandHostList('node[3-1]')).toThrow(/'3-1' runs backwards/);
    expect(() => expandHostList('node[a-b]')).toThrow(/'a-b' is not a number or a range/);
    expect(() => expandHostList('node1,,node2')).toThrow(/an empty host name/);
  });

  // As many hosts as one run may have ranks (MAX_RANKS), counted exactly before any is listed (docs/bounds.md).
  it('counts the hosts of the whole list before listing any, and refuses more than a run may have ranks', () => {
    expect(expandHostList('node[1-4096]')).toHaveLength(MAX_RANKS);
    expect(() => expandHostList('node[0-4096]')).toThrow(/host list 'node\[0-4096\]': 4,097 hosts, more than the 4,096 ranks one run may have/);
    // The bound is on the list, not on each bracket: two ranges of 3,000, thirty of 100,000, brackets that multiply.
    expect(() => expandHostList('a[1-3000],b[1-3000]')).toThrow(/: 6,000 hosts, more than the 4,096 ranks/);
    const thirty = Array.from({ length: 30 }, (_, i) => `r${i}n[1-100000]`).join(',');
    expect(() => expandHostList(thirty)).toThrow(/: 3,000,000 hosts, more than the 4,096 ranks/);
    expect(() => expandHostList('rack[0-999]-n[0-999]')).toThrow(/: 1,000,000 hosts, more than the 4,096 ranks/);
    expect(() => expandHostList('node[1-99999999999999999999]')).toThrow(/: 99,999,999,999,999,999,999 hosts, more than/);
  });

  it('counts and lists host numbers past 2⁵³ exactly, with their zero padding', () => {
    expect(() => expandHostList('node[9007199254740993-9007199254840993]')).toThrow(/: 100,001 hosts, more than the 4,096 ranks/);
    // As doubles, 9007199254740993 is 9007199254740992 and so is its successor: counting up from it never ended.
    expect(expandHostList('node[9007199254740992-9007199254740993]')).toEqual(['node9007199254740992', 'node9007199254740993']);
    expect(expandHostList('node[9007199254740995,9007199254740997]')).toEqual(['node9007199254740995', 'node9007199254740997']);
    expect(expandHostList('n[0009007199254740994-0009007199254740995]')).toEqual(['n0009007199254740994', 'n0009007199254740995']);
    expect(() => expandHostList('node[9007199254740992-9007199254749999]')).toThrow(/: 9,008 hosts, more than the 4,096 ranks/);
  });

  it('expands tasks per node: 2(x3),1 is 2, 2, 2, 1', () => {
    expect(expandTasksPerNode('2(x3),1')).toEqual([2, 2, 2, 1]);
    expect(expandTasksPerNode('8')).toEqual([8]);
    expect(() => expandTasksPerNode('2(x0)')).toThrow(/'2\(x0\)' counts no task/);
    expect(() => expandTasksPerNode('2x3')).toThrow(/'2x3' is not N or N\(xK\)/);
  });

  it('counts the tasks before listing them, and refuses more than a run may have ranks', () => {
    expect(expandTasksPerNode('2(x2048)')).toHaveLength(2048);
    expect(() => expandTasksPerNode('2(x2048),1')).toThrow(/tasks per node '2\(x2048\),1': 4,097 tasks, more than the 4,096 ranks one run may have/);
    expect(() => expandTasksPerNode('99999999')).toThrow(/: 99,999,999 tasks, more than the 4,096 ranks/);
    expect(() => expandTasksPerNode('1(x99999999999999999999)')).toThrow(/: 99,999,999,999,999,999,999 tasks/);
    expect(() => expandTasksPerNode('9007199254740993(x1)')).toThrow(/: 9,007,199,254,740,993 tasks/);
  });

  it("gives ranks in block order, node by node, each node's tasks on consecutive ports", () => {
    expect(slurmAddresses('node[9-10]', '2,1', 20000)).toEqual(['node9:20000', 'node9:20001', 'node10:20000']);
    expect(() => slurmAddresses('node[1-3]', '2(x2)', 20000)).toThrow(/3 hosts in 'node\[1-3\]' but 2 task counts/);
  });
});

describe('clusterFromEnv', () => {
  const slurm = { SLURM_STEP_NUM_TASKS: '3', SLURM_STEP_NODELIST: 'node[9-10]', SLURM_STEP_TASKS_PER_NODE: '2,1', SLAYFORMER_PORT: '20000' };

  it("reads a Slurm task: rank from SLURM_PROCID, addresses from the step's nodes", () => {
    const spec = clusterFromEnv({ ...slurm, SLURM_PROCID: '2', SLURM_LOCALID: '0', SLURMD_NODENAME: 'node10' });
    expect(spec).toEqual({ rank: 2, addresses: ['node9:20000', 'node9:20001', 'node10:20000'] });
  });

  it('refuses a task that is not where the block order puts it (a cyclic distribution)', () => {
    expect(() => clusterFromEnv({ ...slurm, SLURM_PROCID: '1', SLURM_LOCALID: '0', SLURMD_NODENAME: 'node10' })).toThrow(
      /Slurm task 1 runs on node10:20000 but the block distribution puts it at node9:20001: start the step with srun --distribution=block/,
    );
  });

  it('refuses a step of more tasks than a run may have ranks, naming the variable and its value, before listing an address', () => {
    const env = { SLURM_PROCID: '0', SLAYFORMER_PORT: '20000' };
    expect(() => clusterFromEnv({ ...env, SLURM_STEP_NUM_TASKS: '5000', SLURM_STEP_NODELIST: 'node1', SLURM_STEP_TASKS_PER_NODE: '5000' })).toThrow(
      /^SLURM_STEP_TASKS_PER_NODE=5000: 5,000 tasks, more than the 4,096 ranks one run may have/,
    );
    expect(() => clusterFromEnv({ ...env, SLURM_NTASKS: '5000', SLURM_JOB_NODELIST: 'node[1-5000]', SLURM_TASKS_PER_NODE: '1(x5000)' })).toThrow(
      /^SLURM_JOB_NODELIST=node\[1-5000\]: 5,000 hosts, more than the 4,096 ranks/,
    );
  });

  it('refuses a SLURM_PROCID that is not one of the ranks', () => {
    for (const id of ['3', '-1', 'one', '1.5'])
      expect(() => clusterFromEnv({ ...slurm, SLURM_PROCID: id })).toThrow(`SLURM_PROCID=${id}: not a rank of the step's 3 tasks (0 to 2)`);
  });

  it('derives the port from the job id unless told, so that jobs sharing a node differ', () => {
    const env = { ...slurm, SLAYFORMER_PORT: undefined, SLURM_JOB_ID: '1234', SLURM_PROCID: '0', SLURM_LOCALID: '0', SLURMD_NODENAME: 'node9' };
    expect(clusterFromEnv(env)!.addresses[0]).toBe(`node9:${15000 + 234 * 50}`);
    expect(() => clusterFromEnv({ ...env, SLAYFORMER_PORT: '80' })).toThrow(/SLAYFORMER_PORT=80: expected a port from 1024 to 65000/);
  });

  it("is null for a single task or no Slurm at all, and reads the launcher's variables first", () => {
    expect(clusterFromEnv({ SLURM_PROCID: '0', SLURM_STEP_NUM_TASKS: '1' })).toBeNull();
    expect(clusterFromEnv({})).toBeNull();
    expect(clusterFromEnv({ ...slurm, SLURM_PROCID: '0', SLAYFORMER_RANK: '1', SLAYFORMER_CLUSTER: '127.0.0.1:5000,127.0.0.1:5001' })).toEqual({
      rank: 1,
      addresses: ['127.0.0.1:5000', '127.0.0.1:5001'],
    });
  });
});

describe('xlaCoordinator (jax.distributed of the xla executor)', () => {
  it("is the port the launcher gave, else the one after the ports of rank 0's node", () => {
    const spec = { rank: 1, addresses: ['node01:15000', 'node01:15001', 'node02:15000', 'node02:15001'] };
    expect(xlaCoordinator(spec, { [XLA_COORDINATOR_ENV]: '127.0.0.1:4242' })).toBe('127.0.0.1:4242');
    expect(xlaCoordinator(spec, {})).toBe('node01:15002');
    // Every rank of a Slurm step computes the same address from the same variables.
    const env = { SLURM_PROCID: '3', SLURM_NTASKS: '4', SLURM_JOB_ID: '7', SLURM_STEP_NODELIST: 'gpu[1-2]', SLURM_STEP_TASKS_PER_NODE: '2(x2)' };
    expect(xlaCoordinator(clusterFromEnv(env)!, env)).toBe('gpu1:15352');
  });
});

describe('serverDefText', () => {
  it('names every rank, this task, rank 0 as group and coordination leader, the heartbeat timeout and the join deadline', () => {
    const text = serverDefText({ rank: 1, addresses: ['127.0.0.1:5000', '127.0.0.1:5001'] }, { heartbeatTimeoutMs: 4000, joinTimeoutS: 7.5 });
    expect(text).toContain('cluster { job { name: "worker" tasks { key: 0 value: "127.0.0.1:5000" } tasks { key: 1 value: "127.0.0.1:5001" } } }');
    expect(text).toContain('job_name: "worker" task_index: 1 protocol: "grpc"');
    expect(text).toContain('collective_group_leader: "/job:worker/replica:0/task:0"');
    expect(text).toMatch(
      /coordination_config \{ service_type: "standalone" service_leader: "\/job:worker\/replica:0\/task:0" heartbeat_timeout_in_ms: 4000 shutdown_barrier_timeout_in_ms: \d+ cluster_register_timeout_in_ms: 7500 cluster_register_with_barrier: true coordinated_job_list \{ name: "worker" num_tasks: 2 \} \}/,
    );
  });

  it('refuses a join deadline that is not a positive number of seconds', () => {
    for (const joinTimeoutS of [0, -1, Number.NaN, Number.POSITIVE_INFINITY])
      expect(() => serverDefText({ rank: 0, addresses: ['a:1', 'b:2'] }, { joinTimeoutS })).toThrow(/join timeout .* is not a positive number of seconds/);
  });

  it('refuses a rank outside the cluster, an address that is not host:port, and two ranks on one address', () => {
    expect(() => serverDefText({ rank: 2, addresses: ['a:1', 'b:2'] })).toThrow(/rank 2 is not one of the 2 ranks 0–1/);
    expect(() => serverDefText({ rank: 0, addresses: ['a:1', 'b'] })).toThrow(/rank 1's address 'b' is not host:port/);
    expect(() => serverDefText({ rank: 0, addresses: ['a:1', 'a:1'] })).toThrow(/ranks 0 and 1 both have the address a:1/);
  });
});

// TensorFlow 2.21's messages when a rank never starts (probed with the built binding, docs/distributed.md).
describe('joinFailure', () => {
  const spec = (rank: number, n = 2) => ({ rank, addresses: Array.from({ length: n }, (_, i) => `127.0.0.1:${5000 + i}`) });
  const barrier = (tasks: number[]) =>
    "enabling collective ops for '/job:worker/replica:0/task:0': Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0. " +
    'This usually happens because a task triggered the barrier too early or too slowly.\n# of tasks that reached the barrier: 1/3.\n' +
    `The first task at the barrier: /job:worker/replica:0/task:0. Some timed out task names:\n${tasks.map((t) => `/job:worker/replica:0/task:${t}\n`).join('')}\n` +
    'Additional GRPC error information from remote target /job:worker/replica:0/task:0 while calling /tensorflow.CoordinationService/RegisterTask:\n' +
    ':UNKNOWN:Error received from peer  {grpc_message:"Barrier timed out. ... /job:worker/replica:0/task:0 ...", grpc_status:4}';

  it("names the ranks the coordination service says never registered, with their addresses and the deadline's setting", () => {
    expect(joinFailure(spec(0), barrier([1]), 60).message).toBe(
      'rank 0: rank 1 (127.0.0.1:5001) of 2 did not join within 60 s (train.joinTimeout): is it running, and can it reach the others?',
    );
    expect(joinFailure(spec(0, 3), barrier([1, 2]), 5).message).toMatch(
      /^rank 0: ranks 1 \(127\.0\.0\.1:5001\), 2 \(127\.0\.0\.1:5002\) of 3 did not join within 5 s/,
    );
  });

  it('names rank 0 when this rank could not register with it in time', () => {
    const message =
      "enabling collective ops for '/job:worker/replica:0/task:1': Deadline Exceeded\nAdditional GRPC error information from remote target " +
      '/job:worker/replica:0/task:0 while calling /tensorflow.CoordinationService/RegisterTask:\n:UNKNOWN:Error received from peer  {grpc_status:4, grpc_message:"Deadline Exceeded"}';
    expect(joinFailure(spec(1), message, 60).message).toBe(
      'rank 1: rank 0 (127.0.0.1:5000), which leads the cluster, did not join within 60 s (train.joinTimeout): is it running, and can it reach the others?',
    );
  });

  it("names this rank's port when its server cannot start, and keeps any other failure's first line", () => {
    expect(joinFailure(spec(0), 'Could not start gRPC server\nmore', 60).message).toBe(
      'rank 0: could not start its server on 127.0.0.1:5000 (is 127.0.0.1:5000 already taken?): Could not start gRPC server',
    );
    expect(joinFailure(spec(1), 'something else\nmore', 60).message).toBe('rank 1: could not start its server on 127.0.0.1:5001: something else');
  });
});
