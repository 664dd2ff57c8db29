"""quantize / dequantize live in constexpr.py next to the other (de)quantization kernels."""
