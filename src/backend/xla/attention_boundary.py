# The attention boundary of the XLA route (docs/xla.md, "Attention on the GPU"): softmax attention recorded with
# `train.attentionKernel: fused` reaches the program as custom calls `slayformer.attention` (q, k, v → out) and
# `slayformer.attention_grad` (q, k, v, dOut → dq, dk, dv), over flattened heads [B·H, L, D] with q already scaled,
# their backend_config JSON saying {"causal": bool}. They have no implementation anywhere: the runner replaces each
# by a call of jax.nn.dot_product_attention lowered here, for this platform — cuDNN's fused (flash) attention on
# NVIDIA GPUs, XLA's composed form elsewhere — and the gradient by its jax.vjp (which runs the forward again).
import json

TARGETS = ('slayformer.attention', 'slayformer.attention_grad')


def implementation_for(platform, platform_version, precision):
    """cuDNN where it can run the program's attention: NVIDIA GPUs, bf16 products (its fused attention takes fp16/bf16
    operands only, so fp32 programs keep XLA's form); XLA's composed form elsewhere."""
    nvidia = platform in ('gpu', 'cuda') and 'cuda' in str(platform_version).lower()
    return 'cudnn' if nvidia and precision == 'bf16' else 'xla'


def attention_function(kind, causal, implementation):
    """The jax function a boundary call stands for, over [B·H, L, D] float32 tensors (q already scaled)."""
    import jax
    import jax.numpy as jnp

    def attend(q, k, v):
        # One head per row of the flattened batch: jax takes [batch, length, heads, dim].
        heads = [x[:, :, None, :] for x in (q, k, v)]
        if implementation == 'cudnn':
            heads = [x.astype(jnp.bfloat16) for x in heads]
        out = jax.nn.dot_product_attention(*heads, scale=1.0, is_causal=causal, implementation=implementation)
        return out[:, :, 0, :].astype(jnp.float32)

    if kind == 'slayformer.attention':
        return attend

    def gradient(q, k, v, d_out):
        return jax.vjp(attend, q, k, v)[1](d_out)

    return gradient


def boundary_calls(operation):
    """The boundary custom calls in `operation`'s regions, at any depth."""
    found = []
    for region in operation.regions:
        for block in region.blocks:
            for op in block.operations:
                if op.operation.name == 'stablehlo.custom_call' and call_target(op) in TARGETS:
                    found.append(op)
                found.extend(boundary_calls(op.operation))
    return found


def call_target(op):
    from jax._src.lib.mlir import ir

    return ir.StringAttr(op.attributes['call_target_name']).value


def replace_boundaries(module_bytes, platform, platform_version, precision):
    """
    The program with each boundary call replaced by a call of its jax function (module_bytes: MLIR bytecode or text),
    as bytecode, and what was put in (e.g. 'attention: jax xla × 4'); unchanged, with None, where it has none. A shape
    cuDNN refuses (jax says why when lowering) gets XLA's form, and the note says why.
    """
    import jax
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import func, hlo

    preferred = implementation_for(platform, platform_version, precision)
    used, refused = {}, None
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(module_bytes)
        calls = boundary_calls(module.operation)
        if not calls:
            return module_bytes, None
        functions = {}
        for op in calls:
            target = call_target(op)
            causal = bool(json.loads(ir.StringAttr(op.attributes['backend_config']).value)['causal'])
            shapes = tuple(tuple(ir.RankedTensorType(x.type).shape) for x in op.operands)
            key = (target, causal, shapes)
            if key not in functions:
                specs = [jax.ShapeDtypeStruct(s, 'float32') for s in shapes]
                try:
                    implementation = preferred
                    lowered = jax.jit(attention_function(target, causal, implementation)).lower(*specs)
                except Exception as err:  # noqa: BLE001 — cuDNN's limits (head size, length, GPU): XLA's form, said in the note
                    if preferred == 'xla':
                        raise
                    implementation, refused = 'xla', f'{type(err).__name__}: {err}'.splitlines()[0]
                    lowered = jax.jit(attention_function(target, causal, implementation)).lower(*specs)
                functions[key] = insert_functions(module, ir.Module.parse(lowered.as_text()), f'slayformer_attention_{len(functions)}')
                used[implementation] = True
            with ir.InsertionPoint(op), op.location:
                call = func.CallOp(functions[key], list(op.operands))
                results = list(call.results)
                # tf2xla gives a call with several results one tuple result.
                if len(op.results) == 1 and len(results) > 1:
                    results = [hlo.TupleOp(results).result]
            for old, new in zip(op.results, results):
                old.replace_all_uses_with(new)
            op.operation.erase()
        note = 'attention: ' + ', '.join(f'jax {name}' for name in used) + f' × {len(calls)}' + (f' (cudnn refused: {refused})' if refused else '')
        return module.operation.get_asm(binary=True), note


def insert_functions(module, lowered, prefix):
    """Moves `lowered`'s functions into `module` as private functions named `prefix`_<name>; returns its main."""
    from jax._src.lib.mlir import ir

    functions = [op for op in lowered.body.operations if op.operation.name == 'func.func']
    # Every name is changed before any function moves: a function's calls are renamed where it still is.
    for op in functions:
        name = ir.StringAttr(op.attributes['sym_name']).value
        ir.SymbolTable.replace_all_symbol_uses(name, f'{prefix}_{name}', lowered.operation)
        op.attributes['sym_name'] = ir.StringAttr.get(f'{prefix}_{name}')
        op.attributes['sym_visibility'] = ir.StringAttr.get('private')
    for op in functions:
        module.body.append(op)
    return next(op for op in functions if ir.StringAttr(op.attributes['sym_name']).value == f'{prefix}_main')
