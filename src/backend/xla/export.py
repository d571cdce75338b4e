# Recorded step programs (TensorFlow GraphDefs written by src/backend/tf-graph.ts) → StableHLO, through TensorFlow's
# own tf2xla bridge, run by the venv of `npm run setup:xla` (TensorFlow from the native backend's wheel, pinned jax).
# Usage: python export.py JOB.json — JOB lists programs; for each, <out>.vhlo (a StableHLO portable artifact, which
# newer jax versions read), <out>.mlir (the same module as text, the runner's fallback) and <out>.json (inputs,
# outputs, aliases, versions) are written, each under a temporary name renamed into place, the .json last;
# src/backend/xla/program-cache.ts then writes their checksums (<out>.sha256), by which it trusts a cached entry.
# docs/xla.md describes the route.
#
# A program's inputs and outputs carry names (param:…, opt:m, batch:ids, …). An output named like an input is new
# state: its argument is marked `tf.aliasing_output`, so the runtime updates it in place (the input buffer is
# donated). With "guard", the outputs that are new state are kept only where every scalar named in guard is
# finite (else the old values come back): the non-finite rule (src/train/step.ts) inside the program, so a
# donated update never has to be undone; an output named "applied" (1 = kept) is added. "precision": "bf16" runs
# the program's matrix products in bfloat16 (precision.py); the default "fp32" leaves the module as it is.
import json
import os
import sys

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import tensorflow as tf  # noqa: E402
from tensorflow.core.framework import graph_pb2  # noqa: E402
import jax  # noqa: E402
from jax._src.interpreters import mlir as jax_mlir  # noqa: E402
from jax._src.lib import _jax  # noqa: E402
from jax._src.lib.mlir import ir  # noqa: E402
from jax._src.lib.mlir.dialects import hlo  # noqa: E402
from precision import apply_precision  # noqa: E402  (beside this script: on sys.path)

DTYPES = {'float32': tf.float32, 'int32': tf.int32, 'bool': tf.bool}


def function_of(program):
    """The recorded graph as a TensorFlow function of its named inputs, returning its named outputs."""
    graph_def = graph_pb2.GraphDef()
    with open(program['graphdef'], 'rb') as f:
        graph_def.ParseFromString(f.read())
    body = graph_pb2.GraphDef()
    body.versions.CopyFrom(graph_def.versions)
    # Placeholders become the function's arguments (input_map), so they leave the imported graph.
    body.node.extend(n for n in graph_def.node if n.op != 'Placeholder')
    feeds = program['feeds']
    inputs = list(program['inputs'])
    extra = program.get('extraInputs', [])
    names = inputs + [e['name'] for e in extra]
    specs = [tf.TensorSpec(f['shape'], DTYPES[f['dtype']]) for f in feeds] + [tf.TensorSpec(e['shape'], DTYPES[e['dtype']]) for e in extra]
    guard = program.get('guard')
    outputs = list(program['outputs'])

    def run(*args):
        fetched = tf.graph_util.import_graph_def(body, input_map={f['name']: a for f, a in zip(feeds, args)}, return_elements=program['fetches'], name='g')
        if not guard:
            return fetched
        by_name = dict(zip(names, args))
        ok = tf.constant(True)
        for scalar in guard['finite']:
            value = fetched[outputs.index(scalar)] if scalar in outputs else by_name[scalar]
            ok = tf.logical_and(ok, tf.reduce_all(tf.math.is_finite(value)))
        kept = [tf.where(ok, out, by_name[name]) if name in by_name else out for name, out in zip(outputs, fetched)]
        return kept + [tf.cast(ok, tf.float32)]

    out_names = outputs + (['applied'] if guard else [])
    return tf.function(run, jit_compile=True, input_signature=specs), specs, names, out_names


def export(program):
    fn, specs, in_names, out_names = function_of(program)
    text = fn.experimental_get_compiler_ir(*specs)(stage='stablehlo')
    aliases = [[i, out_names.index(name)] for i, name in enumerate(in_names) if name in out_names]
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(text)
        precision = program.get('precision') or 'fp32'
        bf16_products = apply_precision(module, precision)
        main = next(op for op in module.body.operations if op.operation.name == 'func.func' and ir.StringAttr(op.attributes['sym_name']).value == 'main')
        arguments = main.regions[0].blocks[0].arguments
        if len(arguments) != len(in_names):
            raise SystemExit(f'{program["graphdef"]}: the module takes {len(arguments)} arguments, the program names {len(in_names)} inputs')
        alias_of = dict(aliases)
        i32 = ir.IntegerType.get_signless(32)
        main.attributes['arg_attrs'] = ir.ArrayAttr.get(
            [ir.DictAttr.get({'tf.aliasing_output': ir.IntegerAttr.get(i32, alias_of[i])} if i in alias_of else {}) for i in range(len(in_names))]
        )
        version = hlo.get_version_from_compatibility_requirement(hlo.StablehloCompatibilityRequirement.WEEK_4)
        portable = _jax.mlir.serialize_portable_artifact(module.operation.get_asm(binary=True), version, False)
        text = str(module)
    out = program['out']
    write_replacing(out + '.vhlo', portable)
    write_replacing(out + '.mlir', text.encode())
    shapes = [{'name': n, 'dtype': s.dtype.name, 'shape': s.shape.as_list()} for n, s in zip(in_names, specs)]
    meta = {
        'inputs': shapes,
        'outputs': out_names,
        'aliases': aliases,
        'stablehloVersion': version,
        'precision': precision,
        'bf16Products': bf16_products,
        'tensorflow': tf.__version__,
        'jax': jax.__version__,
    }
    write_replacing(out + '.json', json.dumps(meta).encode())


def write_replacing(path, data):
    """Writes `path` whole or not at all: a run reading the old file meanwhile, or a crash, never sees half of it."""
    temporary = f'{path}.tmp-{os.getpid()}'
    with open(temporary, 'wb') as f:
        f.write(data)
    os.replace(temporary, path)


def main():
    with open(sys.argv[1]) as f:
        job = json.load(f)
    for program in job['programs']:
        export(program)
        print(f'exported {os.path.basename(program["out"])}', file=sys.stderr)


if __name__ == '__main__':
    main()
