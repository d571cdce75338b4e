#!/usr/bin/env python3
# What `train.precision: bf16` does to a program's device memory (docs/xla.md, "Mixed precision"): compiles each given
# fp32 program (an exported <hash>.mlir of .cache/xla/programs or of a compiled folder) on this jax's first device
# three ways and prints XLA's compiled memory (arguments, outputs, temporaries, and the bound runner.py reports):
#   fp32         the program as exported;
#   bf16         precision.py's rewrite (bf16 operands, float32 results: what `train.precision: bf16` runs);
#   bf16-results the products' results rounded to bf16 as well, as PyTorch's autocast keeps them, converted back to
#                float32 for their users, except where the float32 exceptions are products: a product whose
#                result reaches a gather's operand (the head's logits, which the loss reads by target) or a division's
#                divisor (the kernel attentions' denominator column) through data movement, sums, scalings or clamps only.
#   .cache/xla/venv/bin/python bench/xla-precision-memory.py PROGRAM.mlir [...]
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src', 'backend', 'xla'))
import jax  # noqa: E402
from jax._src.interpreters import mlir as jax_mlir  # noqa: E402
from jax._src.lib import xla_client  # noqa: E402
from jax._src.lib.mlir import ir  # noqa: E402
from jax._src.lib.mlir.dialects import hlo  # noqa: E402
from precision import apply_precision, matrix_products  # noqa: E402

# Ops a float32 exception is followed through: they move, sum, scale or clamp values without rounding them away.
CARRIERS = {
    f'stablehlo.{name}'
    for name in (
        'reshape',
        'transpose',
        'slice',
        'concatenate',
        'broadcast_in_dim',
        'convert',
        'add',
        'multiply',
        'maximum',
        'pad',
        'select',
        'dynamic_slice',
        'copy',
    )
}
MODES = ('fp32', 'bf16', 'bf16-results')


def needs_float32_result(product):
    """Whether the product's result reaches a gather's operand or a division's divisor through CARRIERS only."""
    pending, seen = [product.results[0]], set()
    while pending:
        value = pending.pop()
        for use in value.uses:
            owner = use.owner
            if (owner.name == 'stablehlo.gather' and use.operand_number == 0) or (owner.name == 'stablehlo.divide' and use.operand_number == 1):
                return True
            if owner.name in CARRIERS and owner not in seen:
                seen.add(owner)
                pending.extend(owner.results)
    return False


def round_results(module):
    """After apply_precision: each bf16 product not needing a float32 result gets a bf16 result, converted for its users."""
    f32, bf16 = ir.F32Type.get(), ir.BF16Type.get()
    rounded = kept = 0
    for product in matrix_products(module.operation):
        result = product.results[0]
        result_type = ir.RankedTensorType(result.type)
        if ir.RankedTensorType(product.operands[0].type).element_type != bf16 or result_type.element_type != f32:
            continue
        if needs_float32_result(product):
            kept += 1
            continue
        users = [(use.owner, use.operand_number) for use in result.uses]
        with ir.InsertionPoint.after(product), product.location:
            result.set_type(ir.RankedTensorType.get(result_type.shape, bf16))
            widened = hlo.ConvertOp(result_type, result).result
        for owner, index in users:
            owner.operands[index] = widened
        rounded += 1
    module.operation.verify()
    return rounded, kept


def compiled_memory(text, mode, device):
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(text)
        counts = {}
        if mode != 'fp32':
            counts['bf16Products'] = apply_precision(module, 'bf16')
        if mode == 'bf16-results':
            counts['bf16Results'], counts['float32Results'] = round_results(module)
        code = module.operation.get_asm(binary=True)
    client = device.client
    options = xla_client.CompileOptions()
    if hasattr(client, 'compile_and_load'):
        executable = client.compile_and_load(code, xla_client.DeviceList((device,)), options)
    else:
        executable = client.compile(code, options)
    stats = executable.get_compiled_memory_stats()
    bound = stats.argument_size_in_bytes + stats.output_size_in_bytes - stats.alias_size_in_bytes + stats.temp_size_in_bytes
    return {
        'mode': mode,
        **counts,
        'argumentBytes': stats.argument_size_in_bytes,
        'outputBytes': stats.output_size_in_bytes,
        'tempBytes': stats.temp_size_in_bytes,
        'boundBytes': bound,
    }


def main():
    files = sys.argv[1:]
    if not files or any(f.startswith('-') for f in files):
        raise SystemExit('usage: python bench/xla-precision-memory.py PROGRAM.mlir [...] (fp32 programs exported by export.py)')
    device = jax.devices()[0]
    print(f'jax {jax.__version__} on {device.platform} ({device.device_kind})')
    mib = lambda n: f'{n / 2**20:,.1f}'  # noqa: E731
    print('| program | mode | products bf16-out / kept f32-out | temporaries MiB | compiled bound MiB |')
    print('| --- | --- | ---: | ---: | ---: |')
    for file in files:
        meta_file = file[: -len('.mlir')] + '.json' if file.endswith('.mlir') else None
        if not meta_file or not os.path.exists(meta_file):
            raise SystemExit(f'{file}: not an exported program (<hash>.mlir beside its <hash>.json)')
        with open(meta_file) as f:
            if json.load(f).get('precision', 'fp32') != 'fp32':
                raise SystemExit(f'{file}: {meta_file} says the program is not fp32; give the fp32 export')
        with open(file) as f:
            text = f.read()
        for mode in MODES:
            r = compiled_memory(text, mode, device)
            split = f'{r["bf16Results"]} / {r["float32Results"]}' if mode == 'bf16-results' else ''
            print(f'| {os.path.basename(file)[:12]} | {mode} | {split} | {mib(r["tempBytes"])} | {mib(r["boundBytes"])} |', flush=True)


if __name__ == '__main__':
    main()
