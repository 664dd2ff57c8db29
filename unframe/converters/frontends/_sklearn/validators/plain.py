"""Plain data types: pure-Python classes (no native code indexes their content) that skops does
not list as trusted, and references to known functions and types.

Such an object is harmless when skops builds it the data-only way: ``ObjectNode`` makes it with
``cls.__new__`` and sets its attributes (a ``DictNode`` calls the dict type with no arguments and
sets its items), so no constructor runs with arguments from the file, and its attributes are
audited like any others. What a validator refuses is the same type name stored through a loader
that calls code (a constructor with the file's arguments, a reduce), and numeric
hyperparameters that are not finite numbers. One line of ``PLAIN`` per type.
"""

from __future__ import annotations

from typing import Any

from unframe.converters.frontends._sklearn.validators import _skops as sk
from unframe.converters.frontends._sklearn.validators.registry import require, validates

_GP = "sklearn.gaussian_process.kernels."
_SELECT = "sklearn.feature_selection._univariate_selection."

# type name -> (the loaders that build it without running code, its numeric hyperparameters)
PLAIN: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # MLP solvers' state (used by partial_fit, never by predict)
    "sklearn.neural_network._stochastic_optimizers.AdamOptimizer":
        (("ObjectNode",), ("learning_rate_init", "beta_1", "beta_2", "epsilon")),
    "sklearn.neural_network._stochastic_optimizers.SGDOptimizer":
        (("ObjectNode",), ("learning_rate_init", "momentum", "power_t")),
    # Gaussian process classifiers and regressors: kernels and the per-class binary model
    "sklearn.gaussian_process._gpc._BinaryGaussianProcessClassifierLaplace":
        (("ObjectNode",), ("log_marginal_likelihood_value_",)),
    _GP + "ConstantKernel": (("ObjectNode",), ("constant_value",)),
    _GP + "WhiteKernel": (("ObjectNode",), ("noise_level",)),
    _GP + "RBF": (("ObjectNode",), ("length_scale",)),
    _GP + "Matern": (("ObjectNode",), ("length_scale", "nu")),
    _GP + "RationalQuadratic": (("ObjectNode",), ("length_scale", "alpha")),
    _GP + "ExpSineSquared": (("ObjectNode",), ("length_scale", "periodicity")),
    _GP + "DotProduct": (("ObjectNode",), ("sigma_0",)),
    _GP + "Sum": (("ObjectNode",), ()),
    _GP + "Product": (("ObjectNode",), ()),
    _GP + "Exponentiation": (("ObjectNode",), ("exponent",)),
    # calibration, one-vs-rest's constant member, Tweedie's loss, voting's named estimators
    "sklearn.calibration._CalibratedClassifier": (("ObjectNode",), ()),
    "sklearn.calibration._SigmoidCalibration": (("ObjectNode",), ("a_", "b_")),
    "sklearn.multiclass._ConstantPredictor": (("ObjectNode",), ()),
    "sklearn._loss.loss.HalfTweedieLossIdentity": (("ObjectNode",), ()),
    "sklearn.utils._bunch.Bunch": (("DictNode",), ()),
    # a dtype (SimpleImputer, KBinsDiscretizer): an empty array of it, read without pickle
    "numpy.dtype": (("DTypeNode",), ()),
    # a dict type (LightGBM's best_score default factory)
    "collections.OrderedDict": (("TypeNode", "DictNode"), ()),
    # the univariate selectors' score functions: a reference to the library's own function
    _SELECT + "f_classif": (("FunctionNode",), ()),
    _SELECT + "f_regression": (("FunctionNode",), ()),
    _SELECT + "r_regression": (("FunctionNode",), ()),
    _SELECT + "chi2": (("FunctionNode",), ()),
    "sklearn.feature_selection._mutual_info.mutual_info_classif": (("FunctionNode",), ()),
    "sklearn.feature_selection._mutual_info.mutual_info_regression": (("FunctionNode",), ()),
}


def check_plain(node: Any) -> None:
    """Built without running code (cls.__new__ and its attributes, an empty dict type, a dtype
    read without pickle, or the library's own function by name); numeric hyperparameters are
    finite numbers or arrays."""
    _, numbers = PLAIN[sk.type_name(node)]
    kind = sk.loader(node)
    if kind == "ObjectNode":
        state = sk.object_state(node, node.class_name)
        for name in numbers:
            if name in state:
                _finite(state[name], name)
    elif kind == "DTypeNode":
        sk.array(node.content, "the dtype's array", "biufcmMSUV")


def _finite(node: Any, name: str) -> None:
    if sk.loader(node) == "NdArrayNode" and sk.type_name(node) == "numpy.ndarray":
        import numpy as np

        arr = sk.array(node, name, "iuf")
        require(np.isfinite(arr).all(), f"{name} holds NaN or infinity")
    elif sk.loader(node) in ("ListNode", "TupleNode"):
        for i, item in enumerate(sk.sequence(node, name)):
            sk.number(item, f"{name}[{i}]")
    else:
        sk.number(node, name)


for _name, (_loaders, _) in PLAIN.items():
    validates(_name, loaders=_loaders)(check_plain)
