# The jax process beside Node that runs the training step's XLA programs (docs/xla.md): it keeps the parameters,
# buffers and AdamW moments as device buffers, compiles the StableHLO programs written by export.py, and answers
# requests from src/backend/xla/runner.ts over stdin/stdout. Needs only Python and jax (no TensorFlow), so that a
# GPU host with jax's CUDA plugin runs it as it is.
#
# Protocol (both directions, little-endian): u32 header length, the header (UTF-8 JSON), then the arrays the
# header lists under "arrays" ([{dtype, shape}]), each as its raw bytes in C order, one after the other. Every
# request gets exactly one reply, in order; a failed request's reply is {"error": "..."}.
#   hello                                     → {jax, jaxlib, platform, device, devices, processIndex, deviceCount}
#   load {key, base}                          → compiles base.vhlo (or base.mlir) as program key: {seconds, via, peakBytes}
#                                               (peakBytes: XLA's compiled bound, null where jaxlib has none)
#   put {names} + arrays                      → state[name] = array on each of this process's devices
#   get {names}                               → the arrays
#   step {micro: [{program, names, device}], sums, stop, apply: {program, names}} + arrays
#        each micro-batch's named arrays, then apply's; micro-batch programs return "loss" and gradients, summed
#        over each device's micro-batches in order (device: this process's device index, default 0), then over the
#        devices of every process (devices.py; `sums` names them, `stop` is added as a flag); the apply program reads
#        state, the sums and its arrays on every device, and its outputs named like state replace it (donated,
#        updated in place)                        → {loss, norm, applied, stopRequested}
#   eval {program, names} + arrays            → {sums: {output: value, or a list of values for a vector}}
#   memory                                    → {peakBytes, bytesInUse} (null where the device reports none) and
#                                               compiledPeakBytes: the largest loaded program's compiled bound
#   gemm {size}                               → {flopsPerSecond}: the best of 5 timed float32 size × size products on
#                                               this process's first device (the MFU's peak on a CPU)
#   exit                                      → {} and the process ends
import json
import math
import os
import signal
import struct
import sys
import time

# Ctrl-C reaches the whole terminal's process group: Node answers it with a last step, pull and checkpoint, which
# need this process; it ends when Node closes its stdin (also when Node is killed).
signal.signal(signal.SIGINT, signal.SIG_IGN)

# The protocol owns file descriptor 1; anything else printing to stdout (jax's warnings) goes to stderr.
PROTOCOL_OUT = os.fdopen(os.dup(1), 'wb')
os.dup2(2, 1)
PROTOCOL_IN = sys.stdin.buffer

# devices.py beside this file; no __pycache__ is left in the checkout (or tried in a read-only install).
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_boundary  # noqa: E402
import devices  # noqa: E402

devices.prepare_environment()

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

if os.environ.get('SLAYFORMER_XLA_PLATFORM'):
    jax.config.update('jax_platforms', os.environ['SLAYFORMER_XLA_PLATFORM'])

DTYPES = {'float32': np.float32, 'int32': np.int32, 'bool': np.bool_}


def number(x):
    """A float for the JSON header: JSON has no NaN or infinities, so they go as the strings nan, inf, -inf."""
    x = float(x)
    return x if math.isfinite(x) else str(x)


def read_exact(n):
    data = PROTOCOL_IN.read(n)
    if data is None or len(data) < n:
        raise EOFError
    return data


def read_message():
    (length,) = struct.unpack('<I', read_exact(4))
    header = json.loads(read_exact(length))
    arrays = []
    for spec in header.get('arrays', []):
        dtype = np.dtype(DTYPES[spec['dtype']])
        count = int(np.prod(spec['shape'], dtype=np.int64))
        arrays.append(np.frombuffer(read_exact(count * dtype.itemsize), dtype=dtype).reshape(spec['shape']))
    return header, arrays


def write_message(header, arrays=()):
    arrays = [np.ascontiguousarray(a) for a in arrays]
    header = dict(header, arrays=[{'dtype': str(a.dtype) if a.dtype != np.bool_ else 'bool', 'shape': list(a.shape)} for a in arrays])
    body = json.dumps(header).encode()
    PROTOCOL_OUT.write(struct.pack('<I', len(body)) + body)
    for a in arrays:
        PROTOCOL_OUT.write(a.tobytes())
    PROTOCOL_OUT.flush()


class Runtime:
    """jax's runtime, through the public jax.extend.backend where it can; which path ran is reported by hello/load."""

    def __init__(self):
        import jax.extend.backend as backend_api

        # This process's devices (one unless $SLAYFORMER_XLA_DEVICES asks for more), joined with the other processes'.
        self.replicas = devices.Replicas(jax)
        self.device = self.replicas.local[0]
        self.client = backend_api.get_backend(self.device.platform)

    def compile(self, module, device):
        from jax._src.lib import xla_client

        options = self.replicas.compile_options(device)
        if hasattr(self.client, 'compile_and_load'):
            return self.client.compile_and_load(module, xla_client.DeviceList((device,)), options)
        return self.client.compile(module, options)

    @staticmethod
    def execute(executable, args):
        if hasattr(executable, 'execute'):
            return executable.execute(args)
        return [outs[0] for outs in executable.execute_sharded(args).disassemble_into_single_device_arrays()]


def read_module(base):
    """The program as MLIR bytecode: the portable artifact where this jax reads it, else the text; and its file."""
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib import _jax

    try:
        with open(base + '.vhlo', 'rb') as f:
            portable = f.read()
        with jax_mlir.make_ir_context():
            return _jax.mlir.deserialize_portable_artifact(portable).operation.get_asm(binary=True), 'portable artifact', base + '.vhlo'
    except Exception as err:  # noqa: BLE001 — any failure of the portable route falls back to the text, and says so
        with open(base + '.mlir') as f:
            return f.read(), f'text ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ""})', base + '.mlir'


def compiled_peak_bytes(executable):
    """
    XLA's bound on an executable's device memory from its buffer assignment: arguments, outputs and temporaries,
    aliased outputs counted once; known on every platform before the first step, None where this jaxlib does not
    report it. (Its `peak_memory_in_bytes` is not used: on jax 0.10.2's CPU it leaves the temporaries out, 0.93 GiB
    for GPT-2 small's gradient program at 1 × 1024 beside 2.3 GiB of temporaries.)
    """
    try:
        stats = executable.get_compiled_memory_stats()
        total = stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes + stats.temp_size_in_bytes
    except Exception:  # noqa: BLE001 — an estimate only: a jaxlib or platform without it reports none
        return None
    return int(total) if total > 0 else None


class Program:
    def __init__(self, runtime, base):
        # Failures name the file: a broken program file is otherwise an error about no file at all.
        try:
            with open(base + '.json') as f:
                self.meta = json.load(f)
            self.inputs = self.meta['inputs']
            self.outputs = self.meta['outputs']
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ValueError(f'{base}.json: {type(err).__name__}: {err}') from err
        module, self.via, file = read_module(base)
        try:
            # Softmax attention recorded as the boundary (train.attentionKernel: fused) gets jax's kernel for this platform.
            module, attention_kernel = attention_boundary.replace_boundaries(
                module, runtime.device.platform, runtime.client.platform_version, self.meta.get('precision')
            )
            if attention_kernel:
                self.via = f'{self.via}; {attention_kernel}'
            # One executable per device of this process, each placed on its device.
            self.executables = [runtime.compile(module, device) for device in runtime.replicas.local]
        except Exception as err:  # noqa: BLE001 — re-raised, naming the file it came from
            raise RuntimeError(f'{file} ({self.via}): {type(err).__name__}: {err}') from err
        self.runtime = runtime
        self.peak_bytes = compiled_peak_bytes(self.executables[0])

    def __call__(self, env, device=0):
        args = []
        for spec in self.inputs:
            value = env.get(spec['name'])
            if value is None:
                raise ValueError(f'program input {spec["name"]} was not given')
            if list(value.shape) != spec['shape'] or np.dtype(value.dtype) != np.dtype(DTYPES[spec['dtype']]):
                raise ValueError(f'program input {spec["name"]} is {value.dtype} {list(value.shape)}, the program takes {spec["dtype"]} {spec["shape"]}')
            args.append(value)
        return dict(zip(self.outputs, Runtime.execute(self.executables[device], args)))


GEMM_SIZES = range(16, 8193)


def gemm_rate(device, size):
    """FLOP/s of the best of 5 float32 size × size products on `device` (after one to compile), 2·size³ each."""
    if not isinstance(size, int) or size not in GEMM_SIZES:
        raise ValueError(f'gemm: size must be an integer from {GEMM_SIZES.start} to {GEMM_SIZES.stop - 1} (got {size!r})')
    a = jax.device_put(np.random.default_rng(0).standard_normal((size, size), dtype=np.float32), device)
    product = jax.jit(lambda x, y: jnp.dot(x, y, precision=jax.lax.Precision.HIGHEST))
    product(a, a).block_until_ready()
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        product(a, a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def end(runtime, status):
    """
    Across processes, ends this one at once: jax.distributed's shutdown (at exit) waits in a barrier for every process,
    which after a failure holds a rank for its timeout; without it a process's end closes its connections, and a peer
    still in a collective fails at once.
    """
    if runtime.replicas.process_count > 1:
        try:
            PROTOCOL_OUT.flush()
        except OSError:
            pass  # Node is gone: nothing to tell it
        os._exit(status)


def main():
    runtime = Runtime()
    local = runtime.replicas.local
    programs = {}
    # Every name's array on each of this process's devices (one replica of the state per device).
    state = {}

    def put(names, arrays):
        return {name: [jax.device_put(a, d) for d in local] for name, a in zip(names, arrays)}

    def put_on(j, names, arrays):
        return {name: jax.device_put(a, local[j]) for name, a in zip(names, arrays)}

    def state_on(j):
        return {name: values[j] for name, values in state.items()}

    while True:
        try:
            header, arrays = read_message()
        except EOFError:
            end(runtime, 1)
            return
        op = header.get('op')
        try:
            if op == 'hello':
                import jaxlib

                write_message(
                    {
                        'jax': jax.__version__,
                        'jaxlib': jaxlib.__version__,
                        'platform': runtime.device.platform,
                        'device': str(runtime.device.device_kind),
                        'devices': len(local),
                        'processIndex': runtime.replicas.process_index,
                        'deviceCount': runtime.replicas.count,
                    }
                )
            elif op == 'load':
                start = time.perf_counter()
                program = Program(runtime, header['base'])
                programs[header['key']] = program
                write_message({'seconds': time.perf_counter() - start, 'via': program.via, 'peakBytes': program.peak_bytes})
            elif op == 'put':
                state.update(put(header['names'], arrays))
                write_message({})
            elif op == 'get':
                write_message({}, [np.asarray(state[name][0]) for name in header['names']])
            elif op == 'step':
                given = iter(arrays)
                sums = [None] * len(local)
                for micro in header['micro']:
                    j = micro.get('device', 0)
                    env = state_on(j)
                    env.update(put_on(j, micro['names'], [next(given) for _ in micro['names']]))
                    outs = programs[micro['program']](env, j)
                    sums[j] = outs if sums[j] is None else {name: jnp.add(sums[j][name], value) for name, value in outs.items()}
                apply = header['apply']
                scalars = [next(given) for _ in apply['names']]
                stop = False
                if runtime.replicas.count > 1:
                    # A device without a micro-batch this step (the plan's last, short step) adds zeros.
                    names = [s['name'] for s in header['sums']]
                    per_device = [
                        {
                            **{
                                s['name']: sums[j][s['name']] if sums[j] is not None else jnp.zeros(s['shape'], jnp.float32, device=local[j])
                                for s in header['sums']
                            },
                            'stop': jax.device_put(np.float32(bool(header.get('stop'))), local[j]),
                        }
                        for j in range(len(local))
                    ]
                    sums = runtime.replicas.all_reduce(per_device, [*names, 'stop'])
                    stop = float(sums[0]['stop']) > 0
                first = None
                for j in range(len(local)):
                    env = state_on(j)
                    env.update(sums[j])
                    env.update(put_on(j, apply['names'], scalars))
                    outs = programs[apply['program']](env, j)
                    for name, value in outs.items():
                        if name in state:
                            state[name][j] = value
                    if j == 0:
                        first = outs
                write_message(
                    {'loss': number(sums[0]['loss']), 'norm': number(first['norm']), 'applied': bool(float(first['applied']) == 1.0), 'stopRequested': stop}
                )
            elif op == 'eval':
                env = state_on(0)
                env.update(put_on(0, header['names'], arrays))
                outs = programs[header['program']](env)
                # A vector output (sum:byPosition) goes as a list of numbers.
                write_message({'sums': {name: number(value) if np.ndim(value) == 0 else [number(v) for v in np.ravel(value)] for name, value in outs.items()}})
            elif op == 'memory':
                stats = [getattr(d, 'memory_stats', lambda: None)() or {} for d in local]
                peaks = [s['peak_bytes_in_use'] for s in stats if s.get('peak_bytes_in_use') is not None]
                in_use = [s['bytes_in_use'] for s in stats if s.get('bytes_in_use') is not None]
                compiled = [p.peak_bytes for p in programs.values() if p.peak_bytes is not None]
                write_message(
                    {
                        'peakBytes': max(peaks) if peaks else None,
                        'bytesInUse': max(in_use) if in_use else None,
                        'compiledPeakBytes': max(compiled) if compiled else None,
                    }
                )
            elif op == 'gemm':
                write_message({'flopsPerSecond': gemm_rate(local[0], header['size'])})
            elif op == 'exit':
                write_message({})
                end(runtime, 0)
                return
            else:
                write_message({'error': f'unknown request {op!r}'})
        except BrokenPipeError:
            # Node is gone (killed) while this request ran: as at the end of its input.
            end(runtime, 1)
            return
        except Exception as err:  # noqa: BLE001 — every failure goes back to Node as the request's error
            write_message({'error': f'{op}: {type(err).__name__}: {err}'})


if __name__ == '__main__':
    main()
