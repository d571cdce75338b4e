#!/usr/bin/env python3
# The offline GPU check of the XLA route (docs/xla.md, "Offline GPU node"): unpacks the archive `npm run xla:archive`
# built (Node.js, the project bundled, the compiled programs, a tokenizer and a data shard; no TensorFlow, no
# weights), then with this Python's jax (its CUDA plugin on a GPU node) trains N steps of the demo GPT and of
# GPT-2 small's shape on seeded random tokens, and N steps of the demo recipe on its data through the trainer, and
# prints tokens/s, peak device memory and the losses beside those of the CPU run made where the archive was built.
#   python3 xla-run.py [--archive slayformer-xla.tar.xz] [--dir DIR] [--steps 20] [--out DIR]
# Needs only Python ≥ 3.10 with jax (and numpy); writes results.json and results.md into --out.
import argparse
import json
import os
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
parser = argparse.ArgumentParser(description='Unpack the slayformer XLA archive and train from it on this host\'s jax device.')
parser.add_argument('--archive', default=os.path.join(HERE, 'slayformer-xla.tar.xz'))
parser.add_argument('--dir', default=os.path.join(HERE, 'slayformer-xla'), help='where to unpack (default: beside this script)')
parser.add_argument('--steps', type=int, default=20, help='timed steps of each bench run (default 20)')
parser.add_argument('--warmup', type=int, default=3, help='steps of each bench run before timing (default 3; the first compiles)')
parser.add_argument('--train-steps', type=int, default=30, help='optimizer steps of the demo recipe through the trainer (default 30)')
parser.add_argument('--out', default='.', help='folder for results.json and results.md')
parser.add_argument('--only', default='', help='comma-separated subset of: demo, gpt2-small, train')
args = parser.parse_args()


def say(line):
    print(line, flush=True)


started = time.time()
if not os.path.exists(os.path.join(args.dir, 'manifest.json')):
    say(f'unpacking {args.archive} into {args.dir}')
    with tarfile.open(args.archive, 'r:xz') as archive:
        archive.extractall(args.dir, filter='data') if sys.version_info >= (3, 12) else archive.extractall(args.dir)
with open(os.path.join(args.dir, 'manifest.json')) as f:
    manifest = json.load(f)
node = os.path.join(args.dir, 'node', 'bin', 'node')
os.chmod(node, 0o755)
os.makedirs(args.out, exist_ok=True)

import jax  # noqa: E402 — after unpacking: the archive step needs nothing but the standard library

device = jax.devices()[0]
say(f'jax {jax.__version__} on {device.platform} ({device.device_kind}); archive of commit {manifest["commit"]}')
env = dict(os.environ, SLAYFORMER_XLA_PYTHON=sys.executable)
results = {'host': {'jax': jax.__version__, 'platform': device.platform, 'device': device.device_kind, 'python': sys.version.split()[0]}, 'commit': manifest['commit'], 'runs': []}
only = set(filter(None, args.only.split(',')))


def run(cmd, extra_env, log):
    say('$ ' + ' '.join(cmd))
    with open(log, 'w') as out:
        proc = subprocess.run(cmd, cwd=args.dir, env=dict(env, **extra_env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out.write(proc.stdout)
    tail = proc.stdout.strip().splitlines()[-6:]
    for line in tail:
        say('  ' + line)
    return proc.returncode


for bench in manifest['bench']:
    if only and bench['model'] not in only:
        continue
    out_json = os.path.join(os.path.abspath(args.out), f"bench-{bench['model']}.json")
    code = run([node, 'app/steps.mjs', '--model', bench['model'], '--programs', bench['programs'], '--steps', str(args.steps), '--warmup', str(args.warmup), '--json', out_json], {}, os.path.join(args.out, f"bench-{bench['model']}.log"))
    if code != 0 or not os.path.exists(out_json):
        results['runs'].append({'model': bench['model'], 'error': f'exit {code} (see bench-{bench["model"]}.log)'})
        continue
    with open(out_json) as f:
        mine = json.load(f)
    cpu = bench.get('cpu')
    if cpu:
        compared = min(len(cpu['losses']), len(mine['losses']))
        mine['cpu'] = {k: cpu[k] for k in ('jax', 'platform', 'msPerStep', 'tokensPerSecond', 'losses')}
        mine['maxLossDifference'] = max(abs(a - b) for a, b in zip(mine['losses'][:compared], cpu['losses'][:compared]))
        mine['comparedSteps'] = compared
    results['runs'].append(mine)

if not only or 'train' in only:
    train = manifest['train']
    run_dir = os.path.join(os.path.abspath(args.out), 'runs')
    tokens = args.train_steps * train['tokensPerStep']
    code = run([node, 'app/train.mjs', train['recipe'], '--backend', 'cpu', '--train.executor=xla', f'--train.maxTokens={tokens}', f'--train.runDir={run_dir}', f'--train.evalInterval={args.train_steps}', '--train.logInterval=10'],
               {'SLAYFORMER_XLA_PROGRAMS': train['programs']}, os.path.join(args.out, 'train.log'))
    record = {'model': 'demo recipe (trainer, data, checkpoints)', 'recipe': train['recipe'], 'steps': args.train_steps}
    metrics = []
    if os.path.isdir(run_dir):
        for name in sorted(os.listdir(run_dir)):
            path = os.path.join(run_dir, name, 'metrics.jsonl')
            if os.path.exists(path):
                with open(path) as f:
                    metrics = [json.loads(line) for line in f if line.strip()]
    record['metrics'] = [{k: m.get(k) for k in ('split', 'step', 'loss', 'tokens_per_s')} for m in metrics]
    record['cpu'] = train['cpu']
    if code != 0:
        record['error'] = f'exit {code} (see train.log)'
    results['runs'].append(record)

results['seconds'] = time.time() - started
with open(os.path.join(args.out, 'results.json'), 'w') as f:
    json.dump(results, f, indent=1)

lines = [f"jax {results['host']['jax']} on {results['host']['platform']} ({results['host']['device']}), Python {results['host']['python']}; archive of commit {results['commit']}", '',
         '| run | batch × seq | parameters | ms/step | tokens/s | compile s | peak device memory | loss (steps 1 → last) | CPU jax loss, same steps | max abs Δ loss |',
         '|---|---|---|---|---|---|---|---|---|---|']
for r in results['runs']:
    if 'error' in r and 'losses' not in r and 'metrics' not in r:
        lines.append(f"| {r['model']} | | | | | | | failed: {r['error']} | | |")
    elif 'losses' in r:
        peak = 'n/a' if r['peakBytes'] is None else f"{r['peakBytes'] / 2**20:,.0f} MiB"
        cpu_text = f"{r['cpu']['losses'][0]:.4f} → {r['cpu']['losses'][r['comparedSteps'] - 1]:.4f} ({r['comparedSteps']} steps)" if 'cpu' in r else ''
        worst = f"{r['maxLossDifference']:.2e}" if 'cpu' in r else ''
        lines.append(f"| {r['model']} ({r['path']}) | {r['batch']} × {r['seq']} | {r['parameters']:,} | {r['msPerStep']:.1f} | {r['tokensPerSecond']:,.0f} | {r['compileSeconds']:.1f} | {peak} | {r['losses'][0]:.4f} → {r['losses'][-1]:.4f} | {cpu_text} | {worst} |")
    else:
        train_losses = [m for m in r['metrics'] if m['split'] == 'train']
        cpu_by_step = {m['step']: m['loss'] for m in r['cpu'] if m['split'] == 'train'}
        both = [(m['loss'], cpu_by_step[m['step']]) for m in train_losses if m['step'] in cpu_by_step]
        tps = [m['tokens_per_s'] for m in train_losses if m.get('tokens_per_s')]
        if not train_losses:
            lines.append(f"| {r['model']} | | | | | | | {r.get('error', 'no metrics')} | | |")
            continue
        gpu_text = ' '.join('%d:%.4f' % (m['step'], m['loss']) for m in train_losses)
        cpu_text = ' '.join('%d:%.4f' % (s, l) for s, l in sorted(cpu_by_step.items()))
        worst = f"{max(abs(a - b) for a, b in both):.2e}" if both else ''
        speed = f'{tps[-1]:,.0f} (last window)' if tps else ''
        lines.append(f"| {r['model']} | | | | {speed} | | | {gpu_text} | {cpu_text} | {worst} |")
text = '\n'.join(lines) + '\n'
with open(os.path.join(args.out, 'results.md'), 'w') as f:
    f.write(text)
say('')
say(text)
