"""GaussianProcessClassifier without a vendor-specific op, registered with skl2onnx's own hook.

skl2onnx's converter solves ``L v = W_sr * K_star`` with its custom ``Solve`` op
(domain ``mlprodict``), which onnxruntime does not have. ``L`` (the Cholesky factor of the
Laplace approximation) and ``W_sr`` are constants of the fitted model, so the solve folds into
one constant matrix ``M = L^-1 diag(W_sr)`` and ``v = M @ K_star`` is a plain MatMul.

Per binary Laplace estimator (one per class for one-vs-rest)::

    K*^T = kernel(X, X_train)                      (skl2onnx's kernel converter)
    f*   = K*^T @ (y_train - pi)                   [N,1]
    var  = kernel.diag(X) - sum((M @ K*)^2, axis=0)
    pi*  = sum_j COEFS_j * integral_j(f*, var) + 0.5 * sum(COEFS)   (uses Erf)

    binary:      probabilities = [1 - pi*, pi*], label = classes[f* > 0]
    one-vs-rest: probabilities = pi*_k / sum_k pi*_k, label = classes[argmax]
"""

from __future__ import annotations

from typing import Any

import numpy as np

_KEEP_ALIVE: list[np.ndarray] = []


def _laplace_probability(est: Any, kernel: Any, x: Any, dtype: type, opv: int) -> tuple[Any, Any]:
    """(f_star [N,1], pi_star [N,1]) of one _BinaryGaussianProcessClassifierLaplace."""
    from scipy.linalg import solve_triangular
    from skl2onnx.algebra.onnx_ops import (
        OnnxAdd,
        OnnxDiv,
        OnnxMatMul,
        OnnxMul,
        OnnxReduceSumApi11,
        OnnxReshapeApi13,
        OnnxSqrt,
        OnnxSub,
        OnnxTranspose,
    )
    from skl2onnx.operator_converters._gp_kernels import convert_kernel, convert_kernel_diag
    from sklearn.gaussian_process._gpc import COEFS, LAMBDAS

    k_star_t = convert_kernel(kernel, x, x_train=est.X_train_.astype(dtype), dtype=dtype,
                              op_version=opv)
    f_star = OnnxMatMul(k_star_t, (est.y_train_ - est.pi_).astype(dtype).reshape(-1, 1),
                        op_version=opv)
    m = solve_triangular(est.L_, np.diag(est.W_sr_), lower=True).astype(dtype)
    v = OnnxMatMul(m, OnnxTranspose(k_star_t, op_version=opv), op_version=opv)
    var = OnnxSub(convert_kernel_diag(kernel, x, dtype=dtype, op_version=opv),
                  OnnxReduceSumApi11(OnnxMul(v, v, op_version=opv), axes=[0], keepdims=0,
                                     op_version=opv), op_version=opv)
    var = OnnxReshapeApi13(var, np.array([1, -1], dtype=np.int64), op_version=opv)
    lambdas = LAMBDAS.astype(dtype)  # [5,1]
    # skl2onnx's algebra API may key constants by id(): keep every array alive until the graph
    # is added, or a recycled id silently maps a new constant onto an old one.
    keep = _KEEP_ALIVE

    def c(value: float) -> np.ndarray:
        arr = np.array([value], dtype=dtype)
        keep.append(arr)
        return arr

    alpha = OnnxDiv(c(1.0), OnnxMul(var, c(2.0), op_version=opv), op_version=opv)
    gamma = OnnxMul(lambdas, OnnxReshapeApi13(f_star, np.array([1, -1], dtype=np.int64),
                                              op_version=opv), op_version=opv)
    first = OnnxSqrt(OnnxDiv(c(np.pi), alpha, op_version=opv), op_version=opv)
    inner = OnnxSqrt(OnnxDiv(alpha, OnnxAdd(alpha, lambdas ** 2, op_version=opv),
                             op_version=opv), op_version=opv)
    denom = OnnxMul(c(2.0), OnnxSqrt(OnnxMul(var, c(2.0 * np.pi), op_version=opv),
                                     op_version=opv), op_version=opv)
    integrals = OnnxMul(first, OnnxDiv(_erf(OnnxMul(gamma, inner, op_version=opv), dtype, opv),
                                       denom, op_version=opv), op_version=opv)
    pi_star = OnnxAdd(OnnxReduceSumApi11(OnnxMul(COEFS.astype(dtype), integrals, op_version=opv),
                                         axes=[0], keepdims=0, op_version=opv),
                      c(0.5 * COEFS.sum()), op_version=opv)
    return f_star, OnnxReshapeApi13(pi_star, np.array([-1, 1], dtype=np.int64), op_version=opv)


_ERF_TERMS = 120  # enough for |x| <= 6: the last term is below 1e-27 of the sum


def _erf(x: Any, dtype: type, opv: int) -> Any:
    """Erf. onnxruntime implements Erf for float32 only, and the Williams-Barber sum multiplies
    erf by coefficients up to ~3500 that cancel, so float32 erf costs ~1e-4 in probability. The
    double route therefore computes erf from the positive series (no cancellation)::

        erf(x) = 2x/sqrt(pi) * exp(-x^2) * sum_n (2x^2)^n / (2n+1)!!,  x clipped to [-6, 6]

    with the terms as exp(n*log(2x^2) - log((2n+1)!!)), error ~2e-14."""
    from scipy.special import gammaln
    from skl2onnx.algebra.onnx_ops import (
        OnnxClip,
        OnnxEqual,
        OnnxErf,
        OnnxExp,
        OnnxLog,
        OnnxMul,
        OnnxNeg,
        OnnxReduceSumApi11,
        OnnxSub,
        OnnxUnsqueeze,
        OnnxWhere,
    )

    if dtype != np.float64:
        return OnnxErf(x, op_version=opv)
    n = np.arange(_ERF_TERMS, dtype=np.float64)
    log_double_factorial = gammaln(2 * n + 2) - n * np.log(2.0) - gammaln(n + 1)
    xc = OnnxClip(x, np.array(-6.0), np.array(6.0), op_version=opv)
    square = OnnxMul(xc, xc, op_version=opv)
    t = OnnxMul(square, np.array([2.0]), op_version=opv)
    # t == 0 only when x == 0, where the 2x factor makes the result 0 whatever the sum is.
    safe_t = OnnxWhere(OnnxEqual(t, np.array([0.0]), op_version=opv), np.array([1.0]), t,
                       op_version=opv)
    log_t = OnnxUnsqueeze(OnnxLog(safe_t, op_version=opv), np.array([-1], dtype=np.int64),
                               op_version=opv)
    terms = OnnxExp(OnnxSub(OnnxMul(log_t, n, op_version=opv), log_double_factorial,
                            op_version=opv), op_version=opv)
    series = OnnxReduceSumApi11(terms, axes=[-1], keepdims=0, op_version=opv)
    scale = OnnxMul(OnnxMul(xc, np.array([2.0 / np.sqrt(np.pi)]), op_version=opv),
                    OnnxExp(OnnxNeg(square, op_version=opv), op_version=opv), op_version=opv)
    return OnnxMul(scale, series, op_version=opv)


def _label_table(classes: np.ndarray) -> np.ndarray:
    classes = np.asarray(classes)
    if np.issubdtype(classes.dtype, np.integer) or classes.dtype == bool:
        return classes.astype(np.int64)
    return np.array([str(c) for c in classes], dtype=object)


def convert_gpc(scope: Any, operator: Any, container: Any) -> None:
    from onnx import TensorProto
    from skl2onnx.algebra.onnx_ops import (
        OnnxArgMax,
        OnnxCast,
        OnnxConcat,
        OnnxConstant,
        OnnxDiv,
        OnnxGather,
        OnnxGreater,
        OnnxIdentity,
        OnnxReduceSumApi11,
        OnnxReshapeApi13,
        OnnxSub,
    )
    from skl2onnx.common.data_types import guess_numpy_type

    model = operator.raw_operator
    opv = container.target_opset
    dtype = np.float64 if guess_numpy_type(operator.inputs[0].type) == np.float64 else np.float32
    x = operator.inputs[0]
    label_out, proba_out = operator.outputs[0].full_name, operator.outputs[1].full_name
    base = model.base_estimator_
    labels = _label_table(model.classes_)
    if hasattr(base, "X_train_"):  # binary
        f_star, pi_star = _laplace_probability(base, model.kernel_, x, dtype, opv)
        probs = OnnxConcat(OnnxSub(np.array([1.0], dtype=dtype), pi_star, op_version=opv), pi_star,
                           axis=1, op_version=opv, output_names=[proba_out])
        index = OnnxCast(OnnxGreater(f_star, np.array([0.0], dtype=dtype), op_version=opv),
                         to=TensorProto.INT64, op_version=opv)
        index = OnnxReshapeApi13(index, np.array([-1], dtype=np.int64), op_version=opv)
    else:
        if getattr(model, "multi_class", "one_vs_rest") != "one_vs_rest":
            raise NotImplementedError("GaussianProcessClassifier(multi_class='one_vs_one') has no "
                                      "ONNX converter; use multi_class='one_vs_rest'")
        columns = [_laplace_probability(est, est.kernel_, x, dtype, opv)[1]
                   for est in base.estimators_]
        stacked = OnnxConcat(*columns, axis=1, op_version=opv)
        total = OnnxReduceSumApi11(stacked, axes=[1], keepdims=1, op_version=opv)
        probs = OnnxDiv(stacked, total, op_version=opv, output_names=[proba_out])
        index = OnnxArgMax(stacked, axis=1, keepdims=0, op_version=opv)
    if labels.dtype == object:  # strings go in a Constant node (see hist_gradient_boosting)
        from onnx import helper

        labels = OnnxConstant(value=helper.make_tensor(
            "classes", TensorProto.STRING, [len(labels)], [s.encode() for s in labels]),
            op_version=opv)
    label = OnnxIdentity(OnnxGather(labels, index, axis=0, op_version=opv), op_version=opv,
                         output_names=[label_out])
    label.add_to(scope, container)
    probs.add_to(scope, container)


def register() -> None:
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import calculate_linear_classifier_output_shapes
    from sklearn.gaussian_process import GaussianProcessClassifier

    update_registered_converter(
        GaussianProcessClassifier, "UnframeGaussianProcessClassifier",
        calculate_linear_classifier_output_shapes, convert_gpc,
        options={"zipmap": [True, False, "columns"], "nocl": [True, False]})
