# Mixed precision of an exported program (`train.precision: bf16`, docs/xla.md "Mixed precision"): a rewrite of
# the StableHLO module export.py takes from TensorFlow, before it is written. Every matrix product (stablehlo.dot,
# stablehlo.dot_general) whose operands are float32 gets them converted to bfloat16 and keeps its float32 result:
# XLA runs it as a bf16 × bf16 product accumulated in float32 (cuBLAS/cuDNN on NVIDIA GPUs; on CPU a bf16 dot
# with an f32 result, as jax lowers `preferred_element_type=float32`). Nothing else changes: every other op
# (softmax and its normaliser, LayerNorm's statistics, the loss, the kernel attentions' division) reads and writes
# float32, and the parameters the program takes and the gradients it returns stay float32.
# Rounding the products' results to bf16 as well (autocast's activations) was measured and not adopted: docs/xla.md
# (bench/xla-precision-memory.py).
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import hlo

PRECISIONS = ('fp32', 'bf16')
PRODUCTS = ('stablehlo.dot', 'stablehlo.dot_general')


def matrix_products(operation):
    """Every matrix product in `operation`'s regions, nested ones (a while loop's body) included."""
    found = []
    for region in operation.regions:
        for block in region.blocks:
            for inner in block.operations:
                found.extend(matrix_products(inner.operation))
    if operation.name in PRODUCTS:
        found.append(operation)
    return found


def apply_precision(module, precision):
    """Rewrites `module` (in the current MLIR context) for `precision`; returns how many products now take bf16."""
    if precision not in PRECISIONS:
        raise SystemExit(f'precision must be one of {", ".join(PRECISIONS)} (got {precision!r})')
    if precision == 'fp32':
        return 0
    f32 = ir.F32Type.get()
    bf16 = ir.BF16Type.get()
    rewritten = 0
    for product in matrix_products(module.operation):
        operand_types = [ir.RankedTensorType(v.type) for v in product.operands[:2]]
        if any(t.element_type != f32 for t in operand_types):
            continue
        with ir.InsertionPoint(product), product.location:
            for i, t in enumerate(operand_types):
                product.operands[i] = hlo.ConvertOp(ir.RankedTensorType.get(t.shape, bf16), product.operands[i]).result
        rewritten += 1
    module.operation.verify()
    return rewritten
