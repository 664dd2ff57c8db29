"""scaled_dot_product_attention (iOS18 transformers.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.kernels._util import acc_dtype
from unframe.converters.backends.coreml.mil_eval.registry import kernel


@kernel("scaled_dot_product_attention")
def scaled_dot_product_attention(ctx: Any, query: np.ndarray, key: np.ndarray, value: np.ndarray,
                                 attn_mask: Any = None) -> np.ndarray:
    """softmax(Q K^T / sqrt(E) + mask) V; a bool mask keeps True positions (False -> -inf)."""
    acc = acc_dtype(query, key, value)
    q, k, v = (np.asarray(t, acc) for t in (query, key, value))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(np.asarray(q.shape[-1], acc))
    if attn_mask is not None:
        mask = np.asarray(attn_mask)
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask.astype(acc)
    scores = scores - np.max(scores, axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / np.sum(weights, axis=-1, keepdims=True)
    return weights @ v
