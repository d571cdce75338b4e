#!/usr/bin/env python3
# The offline GPU check of the XLA route (docs/xla.md, "Offline GPU node"): unpacks the archive `npm run xla:archive`
# built (Node.js, the project bundled, the compiled programs, a tokenizer and a data shard; no TensorFlow, no
# weights), then with this Python's jax (its CUDA plugin on a GPU node) trains N steps of the demo GPT and of
# GPT-2 small's shape on seeded random tokens, and N steps of the demo recipe on its data through the trainer, and
# prints tokens/s, peak device memory and the losses beside those of the CPU run made where the archive was built.
#   python3 xla-run.py --archive slayformer-xla.tar.xz [--dir DIR] [--steps 20] [--out DIR]
# Needs only Python ≥ 3.10 with jax (and numpy); writes results.json and results.md into --out.
#
# Before anything runs, the archive is checked (docs/xla.md): every member must be a file or folder that stays inside
# --dir (an absolute name, a `..` or a link is refused before a byte is written; tarfile's `data` filter guards the
# extraction too where this Python has it), --dir must be new or empty, and the unpacked files must match SHA256SUMS
# (every file listed, none missing, none altered).
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUMS_FILE = 'SHA256SUMS'
SUM_LINE = re.compile(r'^([0-9a-f]{64})  (.+)$')


class ArchiveError(Exception):
    """An archive or unpacked folder that is not run; the message names the file or member."""


def refusal(member, target):
    """Why `member` must not be unpacked into `target`, or None: only files and folders that stay inside it go."""
    name = member.name
    if name.startswith(('/', '\\')) or os.path.isabs(name):
        return 'is an absolute path'
    if '..' in re.split(r'[/\\]', name):
        return 'climbs out of the folder with ..'
    if member.issym() or member.islnk():
        return f'is a link (to {member.linkname!r}); the archive holds files and folders only'
    if not (member.isfile() or member.isdir()):
        return 'is neither a file nor a folder'
    root = os.path.realpath(target)
    if os.path.commonpath([root, os.path.realpath(os.path.join(root, name))]) != root:
        return f'lands outside {target}'
    return None


def unpack(archive_path, target, data_filter=hasattr(tarfile, 'data_filter')):
    """Unpacks `archive_path` into `target` after checking every member (refusal); nothing is written if one fails."""
    try:
        with tarfile.open(archive_path, 'r:*') as archive:
            members = archive.getmembers()
            for member in members:
                why = refusal(member, target)
                if why:
                    raise ArchiveError(f'{archive_path}: member {member.name!r} {why}: nothing was unpacked')
            if data_filter:
                archive.extractall(target, members=members, filter='data')
            else:
                # Without the data filter (Python < 3.11.4): no set-user-ID or world-writable modes from the archive.
                for member in members:
                    member.mode = 0o755 if member.isdir() or member.mode & 0o100 else 0o644
                archive.extractall(target, members=members)
    except (tarfile.TarError, OSError) as err:
        raise ArchiveError(f'{archive_path}: {type(err).__name__}: {err}') from err


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()


def check_sums(folder):
    """Every file under `folder` must be listed in its SHA256SUMS with that sum, and every listed file must be there."""
    sums_path = os.path.join(folder, SUMS_FILE)
    if not os.path.isfile(sums_path):
        raise ArchiveError(f'{sums_path} is missing: the archive cannot be checked (build it again with npm run xla:archive)')
    listed = {}
    with open(sums_path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            match = SUM_LINE.match(line.rstrip('\n'))
            if not match:
                raise ArchiveError(f'{sums_path}:{number}: not a "<sha256>  <file>" line')
            listed[match.group(2)] = match.group(1)
    found = set()
    for root, dirs, files in os.walk(folder):
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            if os.path.islink(path):
                raise ArchiveError(f'{path} is a link; the archive holds files and folders only')
        for name in files:
            relative = os.path.relpath(os.path.join(root, name), folder).replace(os.sep, '/')
            if relative != SUMS_FILE:
                found.add(relative)
    for relative in sorted(found):
        path = os.path.join(folder, relative)
        if relative not in listed:
            raise ArchiveError(f'{path} is not listed in {sums_path}')
        if sha256_of(path) != listed[relative]:
            raise ArchiveError(f'{path}: its sha256 differs from the one in {sums_path} (a damaged or altered archive)')
    for relative in sorted(set(listed) - found):
        raise ArchiveError(f'{os.path.join(folder, relative)} is listed in {sums_path} but missing')


def say(line):
    print(line, flush=True)


def main():
    parser = argparse.ArgumentParser(description="Unpack the slayformer XLA archive and train from it on this host's jax device.")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument('--archive', help='the archive npm run xla:archive built (slayformer-xla.tar.xz)')
    source.add_argument('--staged', metavar='DIR', help='run the folder npm run xla:archive staged, as it is (its CPU run; no archive, no checksums)')
    parser.add_argument('--dir', default=os.path.join(HERE, 'slayformer-xla'), help='a new or empty folder to unpack into (default: beside this script)')
    parser.add_argument('--steps', type=int, default=20, help='timed steps of each bench run (default 20)')
    parser.add_argument('--warmup', type=int, default=3, help='steps of each bench run before timing (default 3; the first compiles)')
    parser.add_argument('--train-steps', type=int, default=30, help='optimizer steps of the demo recipe through the trainer (default 30)')
    parser.add_argument('--out', default='.', help='folder for results.json and results.md')
    parser.add_argument('--only', default='', help='comma-separated subset of: demo, gpt2-small, train')
    args = parser.parse_args()
    started = time.time()
    try:
        if args.staged:
            args.dir = args.staged
            say(f'running the staged folder {args.dir} as it is')
        else:
            if not os.path.isfile(args.archive):
                raise ArchiveError(f'{args.archive}: no such archive')
            if os.path.isdir(args.dir) and os.listdir(args.dir):
                raise ArchiveError(f'{args.dir} is not empty: xla-run.py unpacks into a new or empty folder (remove it or name another --dir)')
            say(f'unpacking {args.archive} into {args.dir}')
            unpack(args.archive, args.dir)
            check_sums(args.dir)
            say(f'checked every file against {SUMS_FILE}')
    except ArchiveError as err:
        print(f'xla-run.py: {err}', file=sys.stderr)
        sys.exit(2)
    run_archive(args, started)


def mfu_text(mfu):
    """MFU as a percentage: model FLOPs per token × tokens/s over the device's peak (docs/training.md); blank without a peak."""
    return '' if mfu is None else f'{100 * mfu:.1f}%'


def run_archive(args, started):
    with open(os.path.join(args.dir, 'manifest.json')) as f:
        manifest = json.load(f)
    node = os.path.join(args.dir, 'node', 'bin', 'node')
    os.chmod(node, 0o755)
    os.makedirs(args.out, exist_ok=True)

    import jax  # here: the archive's checks need only the standard library (and its tests import this file without jax)

    device = jax.devices()[0]
    say(f'jax {jax.__version__} on {device.platform} ({device.device_kind}); archive of commit {manifest["commit"]}')
    env = dict(os.environ, SLAYFORMER_XLA_PYTHON=sys.executable)
    results = {
        'host': {'jax': jax.__version__, 'platform': device.platform, 'device': device.device_kind, 'python': sys.version.split()[0]},
        'commit': manifest['commit'],
        'runs': [],
    }
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
        out_json = os.path.join(os.path.abspath(args.out), f'bench-{bench["model"]}.json')
        code = run(
            [
                node,
                'app/steps.mjs',
                '--model',
                bench['model'],
                '--programs',
                bench['programs'],
                '--steps',
                str(args.steps),
                '--warmup',
                str(args.warmup),
                '--json',
                out_json,
            ],
            {},
            os.path.join(args.out, f'bench-{bench["model"]}.log'),
        )
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
        code = run(
            [
                node,
                'app/train.mjs',
                train['recipe'],
                '--backend',
                'cpu',
                '--train.executor=xla',
                f'--train.maxTokens={tokens}',
                f'--train.runDir={run_dir}',
                f'--train.evalInterval={args.train_steps}',
                '--train.logInterval=10',
            ],
            {'SLAYFORMER_XLA_PROGRAMS': train['programs']},
            os.path.join(args.out, 'train.log'),
        )
        record = {'model': 'demo recipe (trainer, data, checkpoints)', 'recipe': train['recipe'], 'steps': args.train_steps}
        metrics = []
        if os.path.isdir(run_dir):
            for name in sorted(os.listdir(run_dir)):
                path = os.path.join(run_dir, name, 'metrics.jsonl')
                if os.path.exists(path):
                    with open(path) as f:
                        metrics = [json.loads(line) for line in f if line.strip()]
        record['metrics'] = [{k: m.get(k) for k in ('split', 'step', 'loss', 'tokens_per_s', 'mfu')} for m in metrics]
        record['cpu'] = train['cpu']
        if code != 0:
            record['error'] = f'exit {code} (see train.log)'
        results['runs'].append(record)

    results['seconds'] = time.time() - started
    with open(os.path.join(args.out, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1)

    lines = [
        f'jax {results["host"]["jax"]} on {results["host"]["platform"]} ({results["host"]["device"]}), Python {results["host"]["python"]}; archive of commit {results["commit"]}',
        '',
        '| run | batch × seq | parameters | ms/step | tokens/s | MFU | compile s | peak device memory | loss (steps 1 → last) | CPU jax loss, same steps | max abs Δ loss |',
        '|---|---|---|---|---|---|---|---|---|---|---|',
    ]
    for r in results['runs']:
        if 'error' in r and 'losses' not in r and 'metrics' not in r:
            lines.append(f'| {r["model"]} | | | | | | | | failed: {r["error"]} | | |')
        elif 'losses' in r:
            peak = 'n/a' if r['peakBytes'] is None else f'{r["peakBytes"] / 2**20:,.0f} MiB'
            cpu_text = f'{r["cpu"]["losses"][0]:.4f} → {r["cpu"]["losses"][r["comparedSteps"] - 1]:.4f} ({r["comparedSteps"]} steps)' if 'cpu' in r else ''
            worst = f'{r["maxLossDifference"]:.2e}' if 'cpu' in r else ''
            lines.append(
                f'| {r["model"]} ({r["path"]}) | {r["batch"]} × {r["seq"]} | {r["parameters"]:,} | {r["msPerStep"]:.1f} | {r["tokensPerSecond"]:,.0f} | {mfu_text(r.get("mfu"))} | {r["compileSeconds"]:.1f} | {peak} | {r["losses"][0]:.4f} → {r["losses"][-1]:.4f} | {cpu_text} | {worst} |'
            )
        else:
            train_losses = [m for m in r['metrics'] if m['split'] == 'train']
            cpu_by_step = {m['step']: m['loss'] for m in r['cpu'] if m['split'] == 'train'}
            both = [(m['loss'], cpu_by_step[m['step']]) for m in train_losses if m['step'] in cpu_by_step]
            tps = [m['tokens_per_s'] for m in train_losses if m.get('tokens_per_s')]
            if not train_losses:
                lines.append(f'| {r["model"]} | | | | | | | | {r.get("error", "no metrics")} | | |')
                continue
            gpu_text = ' '.join('%d:%.4f' % (m['step'], m['loss']) for m in train_losses)
            cpu_text = ' '.join('%d:%.4f' % (s, loss) for s, loss in sorted(cpu_by_step.items()))
            worst = f'{max(abs(a - b) for a, b in both):.2e}' if both else ''
            speed = f'{tps[-1]:,.0f} (last window)' if tps else ''
            lines.append(f'| {r["model"]} | | | | {speed} | {mfu_text(train_losses[-1].get("mfu"))} | | | {gpu_text} | {cpu_text} | {worst} |')
    text = '\n'.join(lines) + '\n'
    with open(os.path.join(args.out, 'results.md'), 'w') as f:
        f.write(text)
    say('')
    say(text)


if __name__ == '__main__':
    main()
