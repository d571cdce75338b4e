# Where a recorded step's time goes, op by op, in TensorFlow's own executor: loads a GraphDef that the trainer wrote
# with SLAYFORMER_DUMP_GRAPHS=<folder> (src/backend/tf-graph.ts), runs it in a TF session on random feeds and prints
# the time per call, then the op time per op type and the slowest nodes from TF's step stats (FULL_TRACE).
# Needs the TensorFlow of the native backend as a Python package (same version as `npm run setup:tensorflow` uses):
#   python3 -m venv .venv-tf && .venv-tf/bin/pip install tensorflow-cpu==2.21.0
#   SLAYFORMER_DUMP_GRAPHS=/tmp/graphs npm run bench:train -- softmax --backends tensorflow --replicas 1 --graph on
#   .venv-tf/bin/python bench/profile_graph.py /tmp/graphs/slayformer_step_<pid>_1 [--threads 2] [--int-high 256] [--ops LIB]
# A step that runs the fused CPU kernels names their ops: --ops loads them from src/backend/native/kernels/ built
# as a plain library, their table written beside them first (<tf> = the Python package's folder):
#   mkdir -p /tmp/ops && node --import tsx -e "import('./src/backend/native/kernels.ts').then((m) => process.stdout.write(m.kernelTableSource()))" \
#     > /tmp/ops/kernel_table.inc
#   g++ -shared -fPIC -O3 -march=native -fno-math-errno -fno-trapping-math -std=c++17 -DSLAYFORMER_STANDALONE_OPS -I<tf>/include -I/tmp/ops \
#     src/backend/native/kernels/*.cc -o /tmp/fused_ops.so -L<tf> -l:libtensorflow_framework.so.2
# Why Python: the binding exposes no step stats; TF's profiler in Python reads them from the same executor and kernels.
# Op times overlap (TF runs independent ops side by side), so their sum exceeds the wall time of a call.
import argparse
import collections
import json
import time

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import graph_pb2

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument('base', help='the dumped graph without extension: <folder>/<name> (<name>.pb and <name>.json)')
parser.add_argument('--threads', type=int, default=2, help='intra- and inter-op threads (default 2)')
parser.add_argument('--int-high', type=int, default=256, help='int32 feeds are drawn from [0, N): token ids, rows (default 256)')
parser.add_argument('--calls', type=int, default=5, help='timed calls (default 5)')
parser.add_argument('--top', type=int, default=25, help='slowest nodes shown (default 25)')
parser.add_argument('--ops', help="an op library defining the project's fused ops (src/backend/native/kernels/ built with -DSLAYFORMER_STANDALONE_OPS)")
args = parser.parse_args()

meta = json.load(open(args.base + '.json'))
graph_def = graph_pb2.GraphDef()
graph_def.ParseFromString(open(args.base + '.pb', 'rb').read())
if args.ops:
    tf.load_op_library(args.ops)
graph = tf.Graph()
with graph.as_default():
    tf.graph_util.import_graph_def(graph_def, name='')

rng = np.random.default_rng(0)
feeds = {}
for feed in meta['feeds']:
    tensor = graph.get_tensor_by_name(feed['name'])
    shape = feed['shape']
    if feed['dtype'] == 'int32':
        feeds[tensor] = rng.integers(0, args.int_high, size=shape).astype(np.int32)
    elif feed['dtype'] == 'bool':
        feeds[tensor] = np.ones(shape, dtype=bool)
    else:
        # Parameters small as at initialisation; scalars (loss divisor, step sizes) 1.
        feeds[tensor] = (0.02 * rng.standard_normal(shape)).astype(np.float32) if shape else np.float32(1)
fetches = [graph.get_tensor_by_name(name) for name in meta['fetches']]

config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=args.threads, inter_op_parallelism_threads=args.threads)
with tf.compat.v1.Session(graph=graph, config=config) as session:
    for _ in range(3):
        session.run(fetches, feeds)
    start = time.perf_counter()
    for _ in range(args.calls):
        session.run(fetches, feeds)
    print(f'{len(graph_def.node)} nodes; {(time.perf_counter() - start) / args.calls * 1000:.1f} ms per call')
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    by_type, by_node = collections.Counter(), collections.Counter()
    for _ in range(args.calls):
        metadata = tf.compat.v1.RunMetadata()
        session.run(fetches, feeds, options=options, run_metadata=metadata)
        for device in metadata.step_stats.dev_stats:
            for stats in device.node_stats:
                micros = (stats.op_end_rel_micros - stats.op_start_rel_micros) / args.calls
                kind = stats.timeline_label.split(' = ')[1].split('(')[0] if ' = ' in stats.timeline_label else '?'
                by_type[kind] += micros
                by_node[(stats.node_name, kind)] += micros
    total = sum(by_type.values())
    print(f'op time per call, summed: {total / 1000:.1f} ms')
    for kind, micros in by_type.most_common():
        if micros >= 10:
            print(f'  {kind:40s} {micros / 1000:8.2f} ms  {100 * micros / total:5.1f}%')
    print('slowest nodes:')
    for (name, kind), micros in by_node.most_common(args.top):
        try:
            op = graph.get_operation_by_name(name)
            shapes = ' '.join(str(i.shape) for i in op.inputs) + ' → ' + ' '.join(str(o.shape) for o in op.outputs)
        except KeyError:
            shapes = ''
        print(f'  {name:10s} {kind:28s} {micros / 1000:7.2f} ms  {shapes}')
