# The jax process beside Node that runs the training step's XLA programs (docs/xla.md): it keeps the parameters,
# buffers and AdamW moments as device buffers, compiles the StableHLO programs written by export.py, and answers
# requests from src/backend/xla/runner.ts over stdin/stdout. Needs only Python and jax (no TensorFlow), so that a
# GPU host with jax's CUDA plugin runs it as it is.
#
# Protocol (both directions, little-endian): u32 header length, the header (UTF-8 JSON), then the arrays the
# header lists under "arrays" ([{dtype, shape}]), each as its raw bytes in C order, one after the other. Every
# request gets exactly one reply, in order; a failed request's reply is {"error": "..."}.
#   hello                                     → {jax, jaxlib, platform, device}
#   load {key, base}                          → compiles base.vhlo (or base.mlir) as program key: {seconds, via}
#   put {names} + arrays                      → state[name] = array on the device
#   get {names}                               → the arrays
#   step {micro: [{program, names}], apply: {program, names}} + arrays
#        each micro-batch's named arrays, then apply's; micro-batch programs return "loss" and gradients, summed
#        over micro-batches in order; the apply program reads state, the sums and its arrays, and its outputs named
#        like state replace it (donated, updated in place)      → {loss, norm, applied}
#   eval {program, names} + arrays            → {sums: {output: value}}
#   memory                                    → {peakBytes, bytesInUse} (null where the device reports none)
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

        self.device = jax.devices()[0]
        self.client = backend_api.get_backend(self.device.platform)

    def compile(self, module):
        from jax._src.lib import xla_client

        options = xla_client.CompileOptions()
        if hasattr(self.client, 'compile_and_load'):
            return self.client.compile_and_load(module, xla_client.DeviceList((self.device,)), options)
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
            self.executable = runtime.compile(module)
        except Exception as err:  # noqa: BLE001 — re-raised, naming the file it came from
            raise RuntimeError(f'{file} ({self.via}): {type(err).__name__}: {err}') from err
        self.runtime = runtime

    def __call__(self, env):
        args = []
        for spec in self.inputs:
            value = env.get(spec['name'])
            if value is None:
                raise ValueError(f'program input {spec["name"]} was not given')
            if list(value.shape) != spec['shape'] or np.dtype(value.dtype) != np.dtype(DTYPES[spec['dtype']]):
                raise ValueError(f'program input {spec["name"]} is {value.dtype} {list(value.shape)}, the program takes {spec["dtype"]} {spec["shape"]}')
            args.append(value)
        return dict(zip(self.outputs, Runtime.execute(self.executable, args)))


def main():
    runtime = Runtime()
    programs = {}
    state = {}

    def put(names, arrays):
        return {name: jax.device_put(a, runtime.device) for name, a in zip(names, arrays)}

    while True:
        try:
            header, arrays = read_message()
        except EOFError:
            return
        op = header.get('op')
        try:
            if op == 'hello':
                import jaxlib

                write_message(
                    {'jax': jax.__version__, 'jaxlib': jaxlib.__version__, 'platform': runtime.device.platform, 'device': str(runtime.device.device_kind)}
                )
            elif op == 'load':
                start = time.perf_counter()
                program = Program(runtime, header['base'])
                programs[header['key']] = program
                write_message({'seconds': time.perf_counter() - start, 'via': program.via})
            elif op == 'put':
                state.update(put(header['names'], arrays))
                write_message({})
            elif op == 'get':
                write_message({}, [np.asarray(state[name]) for name in header['names']])
            elif op == 'step':
                given = iter(arrays)
                sums = None
                for micro in header['micro']:
                    env = dict(state)
                    env.update(put(micro['names'], [next(given) for _ in micro['names']]))
                    outs = programs[micro['program']](env)
                    sums = outs if sums is None else {name: jnp.add(sums[name], value) for name, value in outs.items()}
                apply = header['apply']
                env = dict(state)
                env.update(sums)
                env.update(put(apply['names'], [next(given) for _ in apply['names']]))
                outs = programs[apply['program']](env)
                state.update({name: value for name, value in outs.items() if name in state})
                write_message({'loss': number(sums['loss']), 'norm': number(outs['norm']), 'applied': bool(float(outs['applied']) == 1.0)})
            elif op == 'eval':
                env = dict(state)
                env.update(put(header['names'], arrays))
                outs = programs[header['program']](env)
                write_message({'sums': {name: number(value) for name, value in outs.items()}})
            elif op == 'memory':
                stats = getattr(runtime.device, 'memory_stats', lambda: None)() or {}
                write_message({'peakBytes': stats.get('peak_bytes_in_use'), 'bytesInUse': stats.get('bytes_in_use')})
            elif op == 'exit':
                write_message({})
                return
            else:
                write_message({'error': f'unknown request {op!r}'})
        except Exception as err:  # noqa: BLE001 — every failure goes back to Node as the request's error
            write_message({'error': f'{op}: {type(err).__name__}: {err}'})


if __name__ == '__main__':
    main()
