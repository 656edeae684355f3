/* ops_rules.h: the shape rules (ops_shape.c) and cost functions
 * (ops_cost.c) that op_table[] in ops.c points to.  Internal to ir/. */
#ifndef FUSION_OPS_RULES_H
#define FUSION_OPS_RULES_H

#include "ops.h"

#define SHAPE_RULE(name) \
    int name(const ir_graph *g, const ir_node *n, ir_shape out_shape[], ir_dtype out_dtype[], struct diag *err)
SHAPE_RULE(shape_embedding);
SHAPE_RULE(shape_positions);
SHAPE_RULE(shape_linear);
SHAPE_RULE(shape_matmul);
SHAPE_RULE(shape_layernorm);
SHAPE_RULE(shape_same_as_first);
SHAPE_RULE(shape_attention);
SHAPE_RULE(shape_attention_cached);
SHAPE_RULE(shape_qkv_split);
SHAPE_RULE(shape_merge_heads);
SHAPE_RULE(shape_add);
SHAPE_RULE(shape_cross_entropy);
SHAPE_RULE(shape_conv2d);
SHAPE_RULE(shape_batchnorm);
SHAPE_RULE(shape_maxpool);
SHAPE_RULE(shape_avgpool_global);
SHAPE_RULE(shape_flatten);
SHAPE_RULE(shape_given);
SHAPE_RULE(shape_rmsnorm);
SHAPE_RULE(shape_rope);
SHAPE_RULE(shape_split);
SHAPE_RULE(shape_concat);
SHAPE_RULE(shape_scalar);
#undef SHAPE_RULE

#define COST_FN(name) double name(const ir_graph *g, const ir_node *n)
COST_FN(flops_zero);
COST_FN(flops_elementwise_1);
COST_FN(flops_input_elements);
COST_FN(flops_embedding);
COST_FN(flops_embedding_bwd);
COST_FN(flops_linear);
COST_FN(flops_linear_bwd);
COST_FN(flops_matmul);
COST_FN(flops_matmul_bwd);
COST_FN(flops_layernorm);
COST_FN(flops_layernorm_bwd);
COST_FN(flops_gelu);
COST_FN(flops_gelu_bwd);
COST_FN(flops_attention);
COST_FN(flops_attention_bwd);
COST_FN(flops_attention_cached);
COST_FN(flops_softmax);
COST_FN(flops_softmax_bwd);
COST_FN(flops_cross_entropy);
COST_FN(flops_cross_entropy_bwd);
COST_FN(flops_conv2d);
COST_FN(flops_conv2d_bwd);
COST_FN(flops_maxpool);
COST_FN(flops_output_elements);
COST_FN(flops_input_elements_2);
COST_FN(flops_input_elements_12);
COST_FN(flops_output_elements_4);
COST_FN(flops_dy_elements_1);
COST_FN(flops_dy_elements_4);
COST_FN(flops_dy_elements_16);
COST_FN(flops_linear_backward);
COST_FN(flops_matmul_backward);
COST_FN(flops_attention_backward);
COST_FN(flops_conv2d_backward);
COST_FN(flops_per_element);     /* op_def.elem_flops[0] x output elements */
COST_FN(flops_per_element_bwd); /* op_def.elem_flops[1] x output elements */
COST_FN(flops_per_dy_element);  /* backward ops: their forward's elem_flops[1] x dy elements */
COST_FN(bytes_io);
#undef COST_FN

#endif
