"""oclfuse: liboclfuse's fused OpenCL kernels from Python, over PyOpenCL.

    import numpy as np, oclfuse
    x = np.random.rand(4, 1000).astype(np.float32)
    y = oclfuse.rms_norm(x, eps=1e-6)              # NumPy in, NumPy out
    y = oclfuse.rms_norm(x_cl, w_cl, path="fused")  # pyopencl arrays, async

Operations: rms_norm, add_rms_norm, layer_norm, add_layer_norm, their backward
rms_norm_backward (add_rms_norm's too, with dres) and layer_norm_backward, act_and_mul,
act_and_mul_backward, rotary_embedding, rotary_embedding_backward, qk_norm_rope,
qk_norm_rope_cache, attention, attention_paged,
kv_cache_write, l2_topk, l2_topk_sharded, l2_topk_merge,
linear, linear_q (quantized weights: "int8", "int4", GGUF "q8_0" and "q4_0"),
qweight_convert (GGUF blocks into linear_q's separate arrays, on the device),
cross_entropy (softmax cross-entropy, with the gradient in place),
linear_cross_entropy (a language model's head and loss without the logits),
and Expr (generated elementwise kernels; form_id gives an expression's tuning
key; pack_bits / unpack_bits convert its bit matrices). On the host, in NumPy: dequantize (the quantized formats' formulas,
float64) and quantize_q8_0 / quantize_q4_0 (ggml's reference quantizers).
A refused call raises OclfError with the status and the library's sentence.
bf16 is uint16 storage: to_bf16/from_bf16.
"""
from ._capi import (BUILD_FAILED, DB_ERROR, INVALID_ARGUMENT, IO_ERROR, OPENCL_ERROR,
                    OUT_OF_RESOURCES, SUCCESS, UNSUPPORTED)
from ._core import (Context, OclfError, context_for, default_context, from_bf16, storage_dtype,
                    to_bf16, version)
from .expr import Expr, bit_words, form_id, pack_bits, unpack_bits
from .ops import (Shard, act_and_mul, act_and_mul_backward, add_layer_norm, add_rms_norm,
                  attention, attention_paged, cross_entropy, dequantize, kv_cache_write,
                  l2_topk, l2_topk_merge, l2_topk_sharded, layer_norm, layer_norm_backward,
                  linear, linear_cross_entropy, linear_q, pack_mask, qk_norm_rope,
                  qk_norm_rope_cache, quantize_q4_0, quantize_q8_0, qweight_convert, rms_norm,
                  rms_norm_backward, rotary_embedding, rotary_embedding_backward)
from .tuning import (tuning_db_check, tuning_db_default_path, tuning_db_merge, tuning_explain,
                     tuning_params_valid, tuning_resolve)

__all__ = [
    "Context", "OclfError", "context_for", "default_context", "version", "to_bf16", "from_bf16",
    "storage_dtype", "rms_norm", "add_rms_norm", "layer_norm", "add_layer_norm",
    "rms_norm_backward", "layer_norm_backward", "act_and_mul", "act_and_mul_backward",
    "rotary_embedding", "rotary_embedding_backward", "qk_norm_rope", "qk_norm_rope_cache",
    "attention", "attention_paged",
    "kv_cache_write", "l2_topk", "l2_topk_sharded", "l2_topk_merge", "Shard",
    "pack_mask", "linear", "linear_q", "qweight_convert", "dequantize", "quantize_q8_0",
    "quantize_q4_0", "cross_entropy", "linear_cross_entropy", "Expr", "form_id", "bit_words",
    "pack_bits", "unpack_bits", "tuning_db_default_path", "tuning_db_check",
    "tuning_db_merge",
    "tuning_explain", "tuning_resolve", "tuning_params_valid", "SUCCESS", "INVALID_ARGUMENT", "UNSUPPORTED", "BUILD_FAILED",
    "OUT_OF_RESOURCES", "OPENCL_ERROR", "DB_ERROR", "IO_ERROR",
]
