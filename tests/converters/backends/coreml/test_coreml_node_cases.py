"""Per-op tests driven by onnx's own node test cases: each case is brought to opset 21,
translated, saved as .mlpackage, evaluated from the saved package with the MIL evaluator and
compared with the case's expected outputs (bench/coreml_nodes.py runs all of them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from node_cases import all_node_cases, bench_module

# One or more cases per translated op (the benchmark runs all ~1900).
SAMPLE = [
    "test_abs", "test_acos", "test_acosh", "test_add", "test_and2d", "test_argmax_keepdims_random",
    "test_argmax_negative_axis_keepdims_random_select_last_index", "test_argmin_keepdims_random",
    "test_asin", "test_asinh", "test_atan", "test_atanh", "test_averagepool_2d_pads",
    "test_averagepool_2d_ceil", "test_batchnorm_example", "test_ceil", "test_celu",
    "test_clip_default_inbounds", "test_clip", "test_concat_1d_axis_0", "test_constant",
    "test_constantofshape_int_zeros", "test_conv_with_autopad_same",
    "test_conv_with_strides_and_asymmetric_padding", "test_convtranspose",
    "test_convtranspose_autopad_same", "test_convtranspose_output_shape", "test_convtranspose_pads",
    "test_cos", "test_cosh", "test_depthtospace_example", "test_depthtospace_crd_mode_example",
    "test_div", "test_dropout_default", "test_einsum_sum", "test_einsum_batch_matmul", "test_elu",
    "test_equal", "test_erf", "test_exp", "test_expand_dim_changed", "test_eyelike_with_dtype",
    "test_flatten_axis0", "test_floor", "test_gather_0", "test_gather_elements_0",
    "test_gathernd_example_int32", "test_gelu_tanh_1", "test_gemm_beta", "test_globalaveragepool",
    "test_globalmaxpool", "test_greater", "test_greater_equal", "test_group_normalization_example",
    "test_hardmax_axis_0", "test_hardsigmoid", "test_hardswish", "test_identity",
    "test_instancenorm_example", "test_isinf", "test_isnan", "test_l2normalization_axis_0",
    "test_layer_normalization_4d_axis0", "test_leakyrelu", "test_less", "test_less_equal",
    "test_log", "test_logsoftmax_axis_0", "test_lppool_2d_pads", "test_lrn", "test_matmul_2d",
    "test_matmul_4d_1d", "test_max_int8", "test_maxpool_2d_pads", "test_maxpool_2d_ceil",
    "test_maxpool_2d_ceil_output_size_reduce_by_one", "test_mean_example", "test_min_int8",
    "test_mish", "test_mod_uint8", "test_mul", "test_mvn", "test_neg", "test_nonzero_example",
    "test_not_2d", "test_or2d", "test_pow", "test_prelu_example", "test_reciprocal",
    "test_reduce_max_default_axes_keepdim_example", "test_reduce_min_default_axes_keepdims_random",
    "test_reduce_prod_default_axes_keepdims_random", "test_reduce_sum_keepdims_example",
    "test_reduce_mean_keepdims_example", "test_reduce_l1_do_not_keepdims_example",
    "test_reduce_l2_do_not_keepdims_example", "test_reduce_log_sum_desc_axes",
    "test_reduce_log_sum_exp_do_not_keepdims_example", "test_reduce_sum_square_do_not_keepdims_example",
    "test_relu", "test_reshape_one_dim", "test_reshape_negative_dim", "test_reversesequence_time",
    "test_round", "test_scatter_elements_with_axis", "test_scatternd", "test_selu", "test_shape",
    "test_shrink_hard", "test_sigmoid", "test_sign", "test_sin", "test_sinh", "test_size",
    "test_softmax_axis_0", "test_softplus", "test_softsign", "test_spacetodepth",
    "test_split_equal_parts_2d", "test_sqrt", "test_sub", "test_sum_example", "test_tan",
    "test_tanh", "test_thresholdedrelu", "test_tile", "test_transpose_default", "test_triu",
    "test_where_example", "test_xor2d", "test_slice", "test_slice_neg_steps", "test_squeeze",
    "test_unsqueeze_two_axes", "test_top_k", "test_cumsum_1d_exclusive", "test_onehot_with_axis",
    "test_constant_pad", "test_reflect_pad", "test_edge_pad", "test_wrap_pad", "test_hannwindow",
    "test_hammingwindow", "test_blackmanwindow", "test_range_float_type_positive_delta",
    "test_resize_upsample_scales_linear", "test_resize_downsample_scales_cubic_antialias",
    "test_resize_upsample_sizes_nearest_ceil_half_pixel", "test_resize_tf_crop_and_resize",
    "test_gru_defaults", "test_gru_seq_length", "test_lstm_with_peepholes", "test_lstm_batchwise",
    "test_simple_rnn_defaults", "test_rnn_seq_length", "test_if", "test_quantizelinear_axis",
    "test_dequantizelinear", "test_lppool_2d_strides",
    "test_cast_FLOAT_to_FLOAT16", "test_castlike_FLOAT16_to_FLOAT", "test_attention_4d_fp16",
    "test_reduce_max_bool_inputs", "test_reduce_min_bool_inputs",  # bool through int32 (legalize.py)
    # issue 36: ops coremltools' own converters take (more in test_coreml_vendor_ops.py)
    "test_gridsample", "test_gridsample_reflection_padding", "test_gridsample_nearest_align_corners_1_additional_1",
    "test_col2im_pads", "test_col2im_5d", "test_dft_inverse", "test_dft_irfft", "test_dft_axis_opset19",
    "test_stft_with_window", "test_bitwise_and_i32_2d", "test_bitwise_or_ui8_bcast_4v3d",
    "test_bitwise_xor_i16_3d", "test_bitwise_not_3d", "test_bitshift_left_uint8", "test_bitshift_right_uint16",
    "test_einsum_batch_diagonal", "test_batchnorm_example_training_mode", "test_maxpool_3d_dilations",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
]


@pytest.mark.usefixtures("coreml")
@pytest.mark.parametrize("name", SAMPLE)
def test_node_case(name: str, tmp_path: Path) -> None:
    cases = all_node_cases()
    if name not in cases:
        pytest.skip(f"needs onnx node case {name} (not in this onnx version)")
    result = bench_module().run_case(cases[name], tmp_path)
    assert result.status == "pass", f"{result.status}: {result.detail}"
