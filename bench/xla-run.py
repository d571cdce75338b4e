#!/usr/bin/env python3
# The offline GPU check of the XLA route (docs/xla.md, "Offline GPU node"): unpacks the archive `npm run xla:archive`
# built (Node.js, the project bundled, the compiled programs, a tokenizer and a data shard; no TensorFlow, no
# weights), then with this Python's jax (its CUDA plugin on a GPU node), within --budget seconds, in this order:
#   the benchmark rows (bench/xla-plan.ts: GPT-2 small at 16 × 1024 and the long-context rows, each mechanism, softmax
#   also with the fused attention kernel) and
#   the PyTorch peer at their shapes (torch_peer_gpu.py: bf16 autocast, SDPA, torch.compile; --peer-python's torch),
#   then N steps of the demo GPT and of GPT-2 small's 4 × 256 on seeded random tokens, and N steps of the demo recipe
#   through the trainer, with the losses beside those of the CPU run made where the archive was built.
# A row is started only when the budget left covers what it is expected to take (the last row of its kind here, else
# a fixed guess), and stopped at the budget's end; skipped rows are printed and listed with their reason. Writes
# results.json and results.md (tokens/s, ms per step, MFU, compile seconds, peak device memory, where each linear
# mechanism overtakes the fastest softmax row) into --out.
#   python3 xla-run.py --archive slayformer-xla.tar.xz [--dir DIR] [--budget 480] [--steps 20] [--out DIR]
# Needs only Python ≥ 3.10 with jax (and numpy); the peer needs torch (skipped, saying so, without it).
#
# Before anything runs, the archive is checked (docs/xla.md): every member must be a file or folder that stays inside
# --dir (an absolute name, a `..` or a link is refused before a byte is written; tarfile's `data` filter guards the
# extraction too where this Python has it), --dir must be new or empty, and the unpacked files must match SHA256SUMS
# (every file listed, none missing, none altered).
import argparse
import glob
import hashlib
import json
import math
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
    parser.add_argument('--only', default='', help='comma-separated subset of: rows, peer, demo, gpt2-small, train, or row ids')
    parser.add_argument('--budget', type=float, default=480, help='seconds for the whole run, unpacking included (default 480; 0: no limit)')
    parser.add_argument('--row-steps', type=int, default=5, help='timed steps of each benchmark row (default 5)')
    parser.add_argument('--row-warmup', type=int, default=2, help='steps of each row before timing (default 2)')
    parser.add_argument('--peer-python', default=sys.executable, help='the Python whose torch runs the peer (default: this one)')
    parser.add_argument('--peer-device', default='', help='cuda or cpu (default: cuda where jax runs on a GPU, else cpu)')
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


def mib(value):
    return 'n/a' if value is None else f'{value / 2**20:,.0f} MiB'


def kernel_text(row):
    """A row's attention kernel for results.md: `fused (cudnn)` names what the runner filled the boundary with."""
    kernel = kernel_of(row)
    return f'{kernel} ({row["attentionImplementation"]})' if kernel == 'fused' and row.get('attentionImplementation') else kernel


def length_text(seq):
    return f'{seq // 1024}K' if seq % 1024 == 0 else str(seq)


# What a task is expected to take (seconds, its start to its end: Node or Python starting, XLA's compile, the steps)
# until one of its kind has run here; then the longest of those that ran. Guesses for an H200 from the first run there
# (docs/results/xla-gpu.md: 10-17 s of compile per program) plus the steps.
FIRST_GUESS = {'row:gpt2-small': 60, 'row:long': 30, 'row:demo': 25, 'peer:gpt2-small': 100, 'peer:long': 60, 'peer:demo': 60, 'bench': 60, 'train': 60}


class Budget:
    """The run's seconds: a task starts only when what is left covers its expected time, and is stopped at the end."""

    def __init__(self, started, seconds):
        self.deadline = started + seconds if seconds > 0 else math.inf
        self.taken = {}

    def left(self):
        return self.deadline - time.time()

    def expected(self, kind):
        return max(self.taken[kind]) if kind in self.taken else FIRST_GUESS.get(kind, 60)

    def why_not(self, kind):
        """None when `kind` fits, else the skip reason."""
        left, need = self.left(), self.expected(kind)
        return None if need <= left else f'time budget: {max(left, 0):.0f} s left, a {kind} task takes ~{need:.0f} s here'

    def took(self, kind, seconds):
        self.taken.setdefault(kind, []).append(seconds)


def kernel_of(row):
    """train.attentionKernel a row's programs were recorded with (rows of archives from before it: composed)."""
    return row.get('attentionKernel', 'composed')


def crossovers(rows):
    """
    For each precision of the long-context rows and each linear mechanism: the first length at which its ms per step
    is below softmax's at the same length (between the last length where it was not and that one), or that it is not
    within the longest length both ran at. Softmax at a length is its fastest row there, composed or fused;
    `softmaxKernels` names that row's kernel at each of `lengths`.
    """
    found = []
    long_rows = [r for r in rows if r.get('model') == 'long' and r.get('msPerStep') is not None]
    for precision in sorted({r['precision'] for r in long_rows}):
        mine = [r for r in long_rows if r['precision'] == precision]
        fastest = {}
        for r in mine:
            if r['attention'] == 'softmax' and (r['seq'] not in fastest or r['msPerStep'] < fastest[r['seq']]['msPerStep']):
                fastest[r['seq']] = r
        softmax = {seq: r['msPerStep'] for seq, r in fastest.items()}
        for mechanism in sorted({r['attention'] for r in mine} - {'softmax'}):
            ms = {r['seq']: r['msPerStep'] for r in mine if r['attention'] == mechanism}
            both = sorted(set(ms) & set(softmax))
            entry = {
                'mechanism': mechanism,
                'precision': precision,
                'lengths': both,
                'softmaxKernels': [kernel_of(fastest[seq]) for seq in both],
                'overtakesAt': None,
                'notBefore': None,
            }
            if not both:
                entry['text'] = 'not measured (no length where softmax ran too)'
            else:
                for previous, seq in zip([None] + both, both):
                    if ms[seq] < softmax[seq]:
                        entry['overtakesAt'], entry['notBefore'] = seq, previous
                        break
                if entry['overtakesAt'] is None:
                    entry['text'] = f'not within {length_text(both[-1])}'
                elif entry['notBefore'] is None:
                    entry['text'] = f'already at {length_text(entry["overtakesAt"])} (the shortest measured)'
                else:
                    entry['text'] = f'between {length_text(entry["notBefore"])} and {length_text(entry["overtakesAt"])}'
                missing = sorted(set(ms) - set(softmax))
                if missing and entry['overtakesAt'] is None:
                    entry['text'] += f' (softmax did not run at {", ".join(length_text(m) for m in missing)})'
            found.append(entry)
    return found


def run_archive(args, started):
    # Node and the peer run inside --dir or --out: the paths handed to them must not depend on where this started.
    args.dir = os.path.abspath(args.dir)
    with open(os.path.join(args.dir, 'manifest.json')) as f:
        manifest = json.load(f)
    node = os.path.join(args.dir, 'node', 'bin', 'node')
    os.chmod(node, 0o755)
    os.makedirs(args.out, exist_ok=True)
    out_dir = os.path.abspath(args.out)

    import jax  # here: the archive's checks need only the standard library (and its tests import this file without jax)

    device = jax.devices()[0]
    say(f'jax {jax.__version__} on {device.platform} ({device.device_kind}); archive of commit {manifest["commit"]}')
    env = dict(os.environ, SLAYFORMER_XLA_PYTHON=sys.executable)
    results = {
        'host': {'jax': jax.__version__, 'platform': device.platform, 'device': device.device_kind, 'python': sys.version.split()[0]},
        'commit': manifest['commit'],
        'budgetSeconds': args.budget,
        'rows': [],
        'peer': [],
        'runs': [],
    }
    only = set(filter(None, args.only.split(',')))
    budget = Budget(started, args.budget)

    def run(cmd, extra_env, log, cwd=None):
        """Runs `cmd` until it ends or the budget does; its exit status (None when stopped at the budget's end)."""
        say('$ ' + ' '.join(cmd))
        with open(log, 'w') as out:
            try:
                proc = subprocess.run(
                    cmd,
                    cwd=cwd or args.dir,
                    env=dict(env, **extra_env),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=None if budget.left() == math.inf else max(budget.left(), 1),
                )
                output, code = proc.stdout, proc.returncode
            except subprocess.TimeoutExpired as err:
                output, code = (err.stdout or b'').decode(errors='replace') if isinstance(err.stdout, bytes) else (err.stdout or ''), None
            out.write(output)
        for line in output.strip().splitlines()[-6:]:
            say('  ' + line)
        return code

    def attempt(kind, record, target, body):
        """Runs body() (which fills `record`) if the budget allows, else records why not; appends `record` to `target`."""
        why = budget.why_not(kind)
        if why:
            record['skipped'] = why
            say(f'skipped {record.get("id", record.get("model"))}: {why}')
        else:
            begun = time.time()
            body()
            budget.took(kind, time.time() - begun)
        target.append(record)

    # 1. The benchmark rows, and the peer once the rows of its shape have run.
    rows = manifest.get('rows', [])
    want_rows = not only or 'rows' in only
    peer_device = args.peer_device or ('cpu' if device.platform == 'cpu' else 'cuda')
    peer_ready = None

    def run_row(row):
        record = {k: row[k] for k in ('id', 'model', 'attention', 'precision', 'batch', 'seq', 'gradAccum', 'builtSeconds', 'programBytes')}
        record['attentionKernel'] = kernel_of(row)

        def body():
            out_json = os.path.join(out_dir, f'row-{row["id"]}.json')
            # $OUT keeps files two folders down at most: the logs go into one folder
            log = os.path.join(out_dir, 'logs', f'row-{row["id"]}.log')
            code = run(
                [node, 'app/steps.mjs', '--model', row['model'], '--attention', row['attention'], '--batch', str(row['batch']), '--seq', str(row['seq'])]
                + ['--grad-accum', str(row['gradAccum']), '--precision', row['precision'], '--attention-kernel', record['attentionKernel']]
                + ['--programs', row['programs']]
                + ['--steps', str(args.row_steps), '--warmup', str(args.row_warmup), '--json', out_json],
                {},
                log,
            )
            if code != 0 or not os.path.exists(out_json):
                record['error'] = 'stopped at the time budget' if code is None else f'exit {code} (see logs/row-{row["id"]}.log)'
                return
            with open(out_json) as f:
                record.update(json.load(f))
            # What the runner put in the boundary's place (the load's via, e.g. 'attention: jax cudnn × 24'): cuDNN or XLA's form.
            filled = re.search(r'attention: jax (\w+)', record.get('path', ''))
            record['attentionImplementation'] = filled.group(1) if filled else None

        attempt(f'row:{row["model"]}', record, results['rows'], body)

    def run_peer(shape_rows):
        """The peer at the shape of `shape_rows` (one model, tokens per step, length): softmax, bf16 autocast, SDPA, torch.compile."""
        nonlocal peer_ready
        first = shape_rows[0]
        batch = first['batch'] * first['gradAccum']
        record = {'id': f'peer-{first["model"]}-{batch}x{first["seq"]}', 'model': first['model'], 'batch': batch, 'seq': first['seq'], 'device': peer_device}
        if peer_ready is None:
            probe = subprocess.run(
                [args.peer_python, '-c', 'import torch; print(torch.__version__)'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            peer_ready = True if probe.returncode == 0 else f'no torch in {args.peer_python} (--peer-python names one)'
        if peer_ready is not True:
            record['skipped'] = peer_ready
            say(f'skipped {record["id"]}: {peer_ready}')
            results['peer'].append(record)
            return

        def body():
            shape = first['peer']
            log = os.path.join(out_dir, 'logs', f'{record["id"]}.log')
            code = run(
                [args.peer_python, os.path.join(args.dir, 'torch_peer_gpu.py'), '--device', peer_device, '--bf16', '--compile']
                + ['--vocab', str(shape['vocab']), '--d', str(shape['d']), '--layers', str(shape['layers']), '--heads', str(shape['heads'])]
                + ['--seq', str(first['seq']), '--batch', str(batch), '--steps', str(args.row_steps), '--warmup', str(args.row_warmup)]
                + (['--threads', str(os.cpu_count() or 1)] if peer_device == 'cpu' else []),
                {},
                log,
                cwd=out_dir,
            )
            with open(log) as f:
                lines = [line for line in f if line.startswith('{')]
            if code != 0 or not lines:
                record['error'] = 'stopped at the time budget' if code is None else f'exit {code} (see logs/{record["id"]}.log)'
                return
            measured = json.loads(lines[-1])
            record.update(measured)
            # MFU on the project's formula for the same shape (src/model/flops.ts) against the bf16 peak our rows used.
            flops = next((r['modelFlopsPerToken'] for r in shape_rows if r['attention'] == 'softmax'), first['modelFlopsPerToken'])
            peaks = [r.get('peakFlopsPerSecond') for r in results['rows'] if r.get('precision') == 'bf16' and r.get('peakFlopsPerSecond')]
            record['modelFlopsPerToken'] = flops
            record['mfu'] = flops * measured['tokens_per_s'] / peaks[0] if peaks else None

        attempt(f'peer:{first["model"]}', record, results['peer'], body)

    os.makedirs(os.path.join(out_dir, 'logs'), exist_ok=True)

    # The peer runs at each shape of a model once the plan's first stretch of that model's rows has run (GPT-2 small's
    # bf16 rows, then its shape; the long rows of every length, then the peer at each length).
    def shape_of(row):
        return (row['model'], row['batch'] * row['gradAccum'], row['seq'])

    peer_shapes = {}
    for row in rows:
        peer_shapes.setdefault(shape_of(row), []).append(row)
    peer_done = set()
    for i, row in enumerate(rows):
        if want_rows or row['id'] in only:
            run_row(row)
        if i + 1 < len(rows) and rows[i + 1]['model'] == row['model']:
            continue
        for shape, shape_rows in peer_shapes.items():
            if shape[0] == row['model'] and shape not in peer_done and (not only or 'peer' in only):
                peer_done.add(shape)
                run_peer(shape_rows)
    results['crossover'] = crossovers(results['rows'])

    # 2. The bench models' losses beside the CPU run's, then the demo recipe through the trainer.
    for bench in manifest['bench']:
        if only and bench['model'] not in only:
            continue
        record = {'model': bench['model']}

        def bench_body(bench=bench, record=record):
            out_json = os.path.join(out_dir, f'bench-{bench["model"]}.json')
            code = run(
                [node, 'app/steps.mjs', '--model', bench['model'], '--programs', bench['programs']]
                + ['--steps', str(args.steps), '--warmup', str(args.warmup), '--json', out_json],
                {},
                os.path.join(out_dir, 'logs', f'bench-{bench["model"]}.log'),
            )
            if code != 0 or not os.path.exists(out_json):
                record['error'] = 'stopped at the time budget' if code is None else f'exit {code} (see logs/bench-{bench["model"]}.log)'
                return
            with open(out_json) as f:
                mine = json.load(f)
            cpu = bench.get('cpu')
            if cpu:
                compared = min(len(cpu['losses']), len(mine['losses']))
                mine['cpu'] = {k: cpu[k] for k in ('jax', 'platform', 'msPerStep', 'tokensPerSecond', 'losses')}
                mine['maxLossDifference'] = max(abs(a - b) for a, b in zip(mine['losses'][:compared], cpu['losses'][:compared]))
                mine['comparedSteps'] = compared
            record.update(mine)

        attempt('bench', record, results['runs'], bench_body)

    if not only or 'train' in only:
        train = manifest['train']
        record = {'model': 'demo recipe (trainer, data, checkpoints)', 'recipe': train['recipe'], 'steps': args.train_steps}

        def train_body():
            run_dir = os.path.join(out_dir, 'runs')
            tokens = args.train_steps * train['tokensPerStep']
            code = run(
                [node, 'app/train.mjs', train['recipe'], '--backend', 'cpu', '--train.executor=xla', f'--train.maxTokens={tokens}']
                + [f'--train.runDir={run_dir}', f'--train.evalInterval={args.train_steps}', '--train.logInterval=10'],
                {'SLAYFORMER_XLA_PROGRAMS': train['programs']},
                os.path.join(out_dir, 'logs', 'train.log'),
            )
            metrics = []
            for path in sorted(glob.glob(os.path.join(run_dir, '*', 'metrics.jsonl'))):
                with open(path) as f:
                    metrics = [json.loads(line) for line in f if line.strip()]
            record['metrics'] = [{k: m.get(k) for k in ('split', 'step', 'loss', 'tokens_per_s', 'mfu')} for m in metrics]
            record['cpu'] = train['cpu']
            if code != 0:
                record['error'] = 'stopped at the time budget' if code is None else f'exit {code} (see logs/train.log)'

        attempt('train', record, results['runs'], train_body)

    results['seconds'] = time.time() - started
    with open(os.path.join(out_dir, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1)
    text = results_markdown(results)
    with open(os.path.join(out_dir, 'results.md'), 'w') as f:
        f.write(text)
    say('')
    say(text)


def results_markdown(results):
    host = results['host']
    took = f'{results["seconds"]:.0f} s' + (f' of a {results["budgetSeconds"]:.0f} s budget' if results['budgetSeconds'] > 0 else ', no time budget')
    lines = [f'jax {host["jax"]} on {host["platform"]} ({host["device"]}), Python {host["python"]}; archive of commit {results["commit"]}; {took}', '']
    if results['rows']:
        lines += [
            '| row | mechanism | attention kernel | precision | tokens per step | parameters | ms/step | tokens/s | MFU | XLA compile s | recorded + exported where built, s | peak device memory | XLA compiled peak | loss (first → last) |',
            '|---|---|---|---|---|---|---|---|---|---|---|---|---|---|',
        ]
        for r in results['rows']:
            tokens = f'{r["gradAccum"]} × {r["batch"]} × {r["seq"]}' if r['gradAccum'] > 1 else f'{r["batch"]} × {r["seq"]}'
            head = f'| {r["id"]} | {r["attention"]} | {kernel_text(r)} | {r["precision"]} | {tokens} |'
            if 'losses' not in r:
                # parameters, ms/step, tokens/s, MFU and compile s empty; then the build time, the two peaks empty, the reason
                lines.append(f'{head}{" |" * 5} {r["builtSeconds"]:.0f} | | | {r.get("skipped") or r.get("error")} |')
                continue
            lines.append(
                f'{head} {r["parameters"]:,} | {r["msPerStep"]:.1f} | {r["tokensPerSecond"]:,.0f} | {mfu_text(r.get("mfu"))} | {r["compileSeconds"]:.1f} | '
                f'{r["builtSeconds"]:.0f} | {mib(r.get("peakBytes"))} | {mib(r.get("compiledPeakBytes"))} | {r["losses"][0]:.4f} → {r["losses"][-1]:.4f} |'
            )
        lines.append('')
    if results['peer']:
        lines += [
            '| PyTorch peer (softmax, SDPA, bf16 autocast, torch.compile) | batch × seq | parameters | ms/step | tokens/s | MFU | peak device memory |',
            '|---|---|---|---|---|---|---|',
        ]
        for r in results['peer']:
            if 'tokens_per_s' not in r:
                lines.append(f'| {r["id"]} | {r["batch"]} × {r["seq"]} | | | | | {r.get("skipped") or r.get("error")} |')
                continue
            lines.append(
                f'| {r["peer"]} | {r["batch"]} × {r["seq"]} | {r["params"]:,} | {r["step_ms"]:.1f} | {r["tokens_per_s"]:,.0f} | {mfu_text(r.get("mfu"))} | {mib(r.get("peak_bytes"))} |'
            )
        lines.append('')
    if results.get('crossover'):
        lines += [
            '| mechanism | precision | lengths measured | softmax compared (its fastest row at each length) | overtakes softmax (ms per step) |',
            '|---|---|---|---|---|',
        ]
        for c in results['crossover']:
            compared = ', '.join(f'{length_text(s)} {k}' for s, k in zip(c['lengths'], c.get('softmaxKernels', [])))
            lines.append(f'| {c["mechanism"]} | {c["precision"]} | {", ".join(length_text(s) for s in c["lengths"])} | {compared} | {c["text"]} |')
        lines.append('')
    if results['runs']:
        lines += [
            '| run | batch × seq | parameters | ms/step | tokens/s | MFU | compile s | peak device memory | loss (steps 1 → last) | CPU jax loss, same steps | max abs Δ loss |',
            '|---|---|---|---|---|---|---|---|---|---|---|',
        ]
    for r in results['runs']:
        if 'losses' not in r and 'metrics' not in r:
            lines.append(f'| {r["model"]} | | | | | | | | {r.get("skipped") or "failed: " + str(r.get("error"))} | | |')
        elif 'losses' in r:
            cpu_text = f'{r["cpu"]["losses"][0]:.4f} → {r["cpu"]["losses"][r["comparedSteps"] - 1]:.4f} ({r["comparedSteps"]} steps)' if 'cpu' in r else ''
            worst = f'{r["maxLossDifference"]:.2e}' if 'cpu' in r else ''
            lines.append(
                f'| {r["model"]} ({r["path"]}) | {r["batch"]} × {r["seq"]} | {r["parameters"]:,} | {r["msPerStep"]:.1f} | {r["tokensPerSecond"]:,.0f} | {mfu_text(r.get("mfu"))} | {r["compileSeconds"]:.1f} | {mib(r["peakBytes"])} | {r["losses"][0]:.4f} → {r["losses"][-1]:.4f} | {cpu_text} | {worst} |'
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
    return '\n'.join(lines) + '\n'


if __name__ == '__main__':
    main()
