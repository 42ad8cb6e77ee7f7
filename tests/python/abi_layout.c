/* Prints the size and field offsets of every struct of oclfuse.h as JSON, so
 * the Python package's ctypes declarations (python/oclfuse/_capi.py) can be
 * checked against the C compiler's layout. A field added to the header
 * changes a size here even before it is listed. */
#include <oclfuse.h>

#include <stddef.h>
#include <stdio.h>

static int first_struct = 1, first_field;

static void begin(const char *name, size_t size)
{
    printf("%s\n \"%s\": {\"size\": %zu, \"fields\": {", first_struct ? "{" : "}},", name, size);
    first_struct = 0;
    first_field = 1;
}

static void field(const char *name, size_t offset)
{
    printf("%s\"%s\": %zu", first_field ? "" : ", ", name, offset);
    first_field = 0;
}

#define S(type) begin(#type, sizeof(type))
#define F(type, member) field(#member, offsetof(type, member))

int main(void)
{
    S(oclf_context_options);
    F(oclf_context_options, size);
    F(oclf_context_options, kernel_dir);
    F(oclf_context_options, cache_dir);
    F(oclf_context_options, tuning_db);
    F(oclf_context_options, no_tuning_db);
    F(oclf_context_options, validate);
    F(oclf_context_options, log);
    F(oclf_context_options, log_user);

    S(oclf_context_stats);
    F(oclf_context_stats, size);
    F(oclf_context_stats, programs_compiled);
    F(oclf_context_stats, programs_from_disk);
    F(oclf_context_stats, program_hits);
    F(oclf_context_stats, disk_cache_rejected);
    F(oclf_context_stats, kernels_enqueued);
    F(oclf_context_stats, tuning_lookups);
    F(oclf_context_stats, tuning_cache_hits);
    F(oclf_context_stats, tuning_db_errors);

    S(oclf_params);
    F(oclf_params, count);
    F(oclf_params, item);

    S(oclf_choice);
    F(oclf_choice, path);
    F(oclf_choice, params);
    S(oclf_tuning_decision);
    F(oclf_tuning_decision, heuristic);
    F(oclf_tuning_decision, decision);
    F(oclf_tuning_decision, from_record);

    S(oclf_buf);
    F(oclf_buf, mem);
    F(oclf_buf, offset);
    F(oclf_buf, stride);

    S(oclf_activation);
    F(oclf_activation, size);
    F(oclf_activation, kind);
    F(oclf_activation, act_on_second);
    F(oclf_activation, threshold);
    F(oclf_activation, alpha);
    F(oclf_activation, limit);

    S(oclf_rope);
    F(oclf_rope, size);
    F(oclf_rope, style);
    F(oclf_rope, head_dim);
    F(oclf_rope, rot_dim);
    F(oclf_rope, positions);
    F(oclf_rope, pos_type);
    F(oclf_rope, cos_sin);
    F(oclf_rope, cache_dtype);
    F(oclf_rope, max_pos);

    S(oclf_heads);
    F(oclf_heads, buf);
    F(oclf_heads, count);
    F(oclf_heads, head_stride);

    S(oclf_l2_topk_options);
    F(oclf_l2_topk_options, size);
    F(oclf_l2_topk_options, precision);
    F(oclf_l2_topk_options, max_temp_bytes);
    F(oclf_l2_topk_options, x_norms);
    F(oclf_l2_topk_options, allowed);

    S(oclf_l2_shard);
    F(oclf_l2_shard, ctx);
    F(oclf_l2_shard, queue);
    F(oclf_l2_shard, x);
    F(oclf_l2_shard, n);
    F(oclf_l2_shard, dtype);
    F(oclf_l2_shard, first_id);
    F(oclf_l2_shard, x_norms);
    F(oclf_l2_shard, allowed);
    F(oclf_l2_shard, choice);

    S(oclf_linear_epilogue);
    F(oclf_linear_epilogue, size);
    F(oclf_linear_epilogue, alpha);
    F(oclf_linear_epilogue, bias);
    F(oclf_linear_epilogue, residual);
    F(oclf_linear_epilogue, beta);
    F(oclf_linear_epilogue, residual_before_act);
    F(oclf_linear_epilogue, act);

    S(oclf_qweight);
    F(oclf_qweight, size);
    F(oclf_qweight, format);
    F(oclf_qweight, group);
    F(oclf_qweight, q);
    F(oclf_qweight, scale);
    F(oclf_qweight, scale_dtype);
    F(oclf_qweight, zero);

    S(oclf_attention_options);
    F(oclf_attention_options, size);
    F(oclf_attention_options, scale);
    F(oclf_attention_options, causal);
    F(oclf_attention_options, window);
    F(oclf_attention_options, window_left);
    F(oclf_attention_options, window_right);
    F(oclf_attention_options, softcap);
    F(oclf_attention_options, alibi_slopes);
    F(oclf_attention_options, sinks);
    F(oclf_attention_options, lse);
    F(oclf_attention_options, dropout_p);
    F(oclf_attention_options, dropout_seed);
    F(oclf_attention_options, dropout_offset);

    S(oclf_kv_cache);
    F(oclf_kv_cache, size);
    F(oclf_kv_cache, k);
    F(oclf_kv_cache, v);
    F(oclf_kv_cache, k_offset);
    F(oclf_kv_cache, v_offset);
    F(oclf_kv_cache, num_blocks);
    F(oclf_kv_cache, block_size);
    F(oclf_kv_cache, heads);
    F(oclf_kv_cache, head_dim);

    S(oclf_expr_decl);
    F(oclf_expr_decl, name);
    F(oclf_expr_decl, kind);
    F(oclf_expr_decl, dtype);

    S(oclf_expr_arg);
    F(oclf_expr_arg, buf);
    F(oclf_expr_arg, scalar);

    S(oclf_cross_entropy_options);
    F(oclf_cross_entropy_options, size);
    F(oclf_cross_entropy_options, ignore_index);
    F(oclf_cross_entropy_options, reduction);
    F(oclf_cross_entropy_options, label_smoothing);
    F(oclf_cross_entropy_options, softcap);
    F(oclf_cross_entropy_options, z_loss);
    F(oclf_cross_entropy_options, lse);
    F(oclf_cross_entropy_options, compute_grad);
    F(oclf_cross_entropy_options, grad_output);
    F(oclf_cross_entropy_options, max_temp_bytes);
    F(oclf_cross_entropy_options, info);

    S(oclf_linear_cross_entropy_info);
    F(oclf_linear_cross_entropy_info, size);
    F(oclf_linear_cross_entropy_info, chunk_tokens);
    F(oclf_linear_cross_entropy_info, chunks);
    F(oclf_linear_cross_entropy_info, temp_bytes);

    /* enums are passed as int by the ctypes declarations */
    S(oclf_status);
    S(oclf_dtype);
    S(oclf_qformat);
    printf("}}\n}\n");
    return 0;
}
