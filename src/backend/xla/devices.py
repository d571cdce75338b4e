# Several devices for the XLA route's runner (runner.py; docs/xla.md, "Several devices"): data parallelism over this
# process's devices and, with jax's own distributed runtime (jax.distributed: its coordination service, heartbeats,
# and the collectives of the platform — NCCL on GPUs, gloo on CPUs), over the devices of several processes.
# Every device keeps a replica of the state; each runs the exported gradient program on its micro-batches and sums
# them in order; one compiled jax function (shard_map) then adds the devices' sums in device order and hands the
# total to every device; each applies the same update.
#
# The environment runner.ts sets (read before jax makes its backends):
#   SLAYFORMER_XLA_DEVICES      devices of this process to use (default 1; 0 = all of them)
#   SLAYFORMER_XLA_COORDINATOR  host:port of jax's coordination service (process 0 serves it); with the two below
#   SLAYFORMER_XLA_PROCESSES    number of processes
#   SLAYFORMER_XLA_PROCESS_ID   this process's index, 0 … processes − 1
#   SLAYFORMER_XLA_LOCAL_RANKS  each process's index among the processes of its host, comma-separated: on a host
#                               whose processes all see every GPU (`--processes N` on one machine), the i-th takes
#                               GPUs i·devices … (i + 1)·devices − 1
#   SLAYFORMER_XLA_JOIN_TIMEOUT seconds to wait for every process to join (jax's initialization_timeout)
#   SLAYFORMER_XLA_HEARTBEAT_TIMEOUT seconds without a process's heartbeat before jax ends the others (default 10)
import math
import os

DEVICES_ENV = 'SLAYFORMER_XLA_DEVICES'
COORDINATOR_ENV = 'SLAYFORMER_XLA_COORDINATOR'
PROCESSES_ENV = 'SLAYFORMER_XLA_PROCESSES'
PROCESS_ID_ENV = 'SLAYFORMER_XLA_PROCESS_ID'
LOCAL_RANKS_ENV = 'SLAYFORMER_XLA_LOCAL_RANKS'
JOIN_TIMEOUT_ENV = 'SLAYFORMER_XLA_JOIN_TIMEOUT'
HEARTBEAT_TIMEOUT_ENV = 'SLAYFORMER_XLA_HEARTBEAT_TIMEOUT'


def _int_env(name, default, least):
    text = os.environ.get(name)
    if text is None or text == '':
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f'${name}={text!r}: expected an integer') from None
    if value < least:
        raise ValueError(f'${name}={text!r}: expected an integer ≥ {least}')
    return value


def requested_devices():
    """Devices of this process to use: $SLAYFORMER_XLA_DEVICES (0 = all)."""
    return _int_env(DEVICES_ENV, 1, 0)


def prepare_environment():
    """Before jax is imported: jax's CPU platform has one device unless XLA_FLAGS asks for more."""
    wanted = requested_devices()
    flags = os.environ.get('XLA_FLAGS', '')
    if wanted > 1 and '--xla_force_host_platform_device_count' not in flags:
        os.environ['XLA_FLAGS'] = f'{flags} --xla_force_host_platform_device_count={wanted}'.strip()


def initialize_distributed(jax):
    """Joins jax's distributed runtime when the environment names a coordinator; returns (process_index, processes)."""
    coordinator = os.environ.get(COORDINATOR_ENV)
    if not coordinator:
        return 0, 1
    processes = _int_env(PROCESSES_ENV, 1, 1)
    process_id = _int_env(PROCESS_ID_ENV, 0, 0)
    if process_id >= processes:
        raise ValueError(f'${PROCESS_ID_ENV}={process_id}: not a process of {processes} (0 to {processes - 1})')
    # jax's CPU collectives across processes (none by default); GPUs use NCCL whatever this says.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=processes,
        process_id=process_id,
        initialization_timeout=_int_env(JOIN_TIMEOUT_ENV, 300, 1),
        heartbeat_timeout_seconds=_int_env(HEARTBEAT_TIMEOUT_ENV, 10, 1),
        # At exit after another process died, the shutdown barrier waits this long before giving up.
        shutdown_timeout_seconds=_int_env(HEARTBEAT_TIMEOUT_ENV, 10, 1),
    )
    return process_id, processes


class Replicas:
    """The devices a run uses: `requested_devices()` of each process (disjoint on a shared host), in process order, as one mesh."""

    def __init__(self, jax):
        self.jax = jax
        self.process_index, self.process_count = initialize_distributed(jax)
        wanted = requested_devices()
        local = sorted(jax.local_devices(), key=lambda d: d.id)
        if wanted > len(local):
            raise ValueError(f'${DEVICES_ENV}={wanted}: this process has {len(local)} {local[0].platform} device(s)')
        count = wanted or len(local)
        by_process = {}
        for d in sorted(jax.devices(), key=lambda d: d.id):
            by_process.setdefault(d.process_index, []).append(d)
        if sorted(by_process) != list(range(self.process_count)):
            raise ValueError(f'jax sees the devices of processes {sorted(by_process)}, expected 0 to {self.process_count - 1}')
        local_ranks = [int(r) for r in os.environ.get(LOCAL_RANKS_ENV, '').split(',') if r.strip()] or [0] * self.process_count
        if len(local_ranks) != self.process_count:
            raise ValueError(f'${LOCAL_RANKS_ENV} lists {len(local_ranks)} processes, not {self.process_count}')

        def chosen(p):
            # Processes sharing a host's GPUs take disjoint ones; a process that sees only its own (srun
            # --gpus-per-task, CUDA_VISIBLE_DEVICES), and jax's CPU devices, every process's own, start from the first.
            seen = by_process[p]
            start = local_ranks[p] * count
            if seen[0].platform == 'cpu' or start + count > len(seen):
                start = 0
            return seen[start : start + count]

        self.devices = [d for p in range(self.process_count) for d in chosen(p)]
        self.local = chosen(self.process_index)
        if len(self.devices) != count * self.process_count:
            raise ValueError(f'every process must have {count} device(s): jax sees {[len(by_process[p]) for p in sorted(by_process)]}')
        self.first = self.process_index * count
        self._reducers = {}

    @property
    def count(self):
        """Devices over all processes."""
        return len(self.devices)

    def compile_options(self, device):
        """Compile options that place a one-device program on `device` (else PJRT puts it on the first device)."""
        import numpy as np
        from jax._src.lib import xla_client

        options = xla_client.CompileOptions()
        options.device_assignment = xla_client.DeviceAssignment.create(np.array([[device.id]]))
        return options

    def all_reduce(self, per_device, names):
        """
        The sums over every device of every process: per_device[j] is local device j's {name: array} (on that device).
        Returns a {name: array} per local device, equal on all of them. The values are raveled into one vector cut in
        `count` slices; an all-to-all gives each device one slice of every device's vector, which it adds in device
        order (a fixed order, so every device gets the same bits and a given device count always sums alike); an
        all-gather returns the whole vector to every device: the traffic of a ring all-reduce, 2(N − 1)/N of the vector.
        """
        jax = self.jax
        shapes = tuple(tuple(per_device[0][n].shape) for n in names)
        reducer = self._reducers.get((tuple(names), shapes))
        if reducer is None:
            reducer = self._reducers[(tuple(names), shapes)] = self._make_reducer(shapes)
        from jax.sharding import NamedSharding, PartitionSpec

        sharding = NamedSharding(self.mesh, PartitionSpec('d'))
        stacked = [
            jax.make_array_from_single_device_arrays((self.count, *shape), sharding, [per_device[j][n][None] for j in range(len(self.local))])
            for n, shape in zip(names, shapes)
        ]
        totals = reducer(*stacked)
        out = [{} for _ in self.local]
        index = {d: j for j, d in enumerate(self.local)}
        for n, total in zip(names, totals):
            for shard in total.addressable_shards:
                out[index[shard.device]][n] = shard.data
        return out

    @property
    def mesh(self):
        import numpy as np
        from jax.sharding import Mesh

        return Mesh(np.array(self.devices), ('d',))

    def _make_reducer(self, shapes):
        jax = self.jax
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec

        count = self.count
        sizes = [math.prod(s) for s in shapes]
        total = sum(sizes)
        slice_size = -(-total // count)

        def body(*blocks):
            flat = jnp.concatenate([b.reshape(-1) for b in blocks])
            flat = jnp.pad(flat, (0, count * slice_size - total)).reshape(count, slice_size)
            # Row k: device k's values of this device's slice.
            rows = jax.lax.all_to_all(flat, 'd', 0, 0, tiled=True)
            summed = rows[0]
            for k in range(1, count):
                summed = summed + rows[k]
            whole = jax.lax.all_gather(summed, 'd', tiled=True)[:total]
            out, start = [], 0
            for shape, size in zip(shapes, sizes):
                out.append(whole[start : start + size].reshape(shape))
                start += size
            return tuple(out)

        spec = PartitionSpec('d')
        mapped = jax.shard_map(body, mesh=self.mesh, in_specs=tuple(spec for _ in shapes), out_specs=tuple(PartitionSpec() for _ in shapes), check_vma=False)
        return jax.jit(mapped)
