"""Links between validated objects, checked once skops has built the model and before anything
predicts with it.

A validated tree is safe for inputs at least as wide as its feature indices; which input it is
given is decided by the estimator holding it: a decision tree checks the input against its own
``n_features_in_``, a forest or an isolation forest passes its (possibly column-subset) input
on unchecked, gradient boosting writes every tree's output into a column of a buffer it sizes
itself. Each rule reads plain attributes of the built objects (no prediction runs) and proves
that those widths and shapes agree. A rule applies to every object of the model it recognizes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from unframe.converters.frontends._sklearn.validators._skops import Invalid, require
from unframe.converters.frontends._sklearn.validators.registry import CRAFTED_HINT
from unframe.errors import InputError, TrustRequiredError

Rule = Callable[[Any], None]


def _is_tree(obj: Any) -> bool:
    return type(obj).__module__ == "sklearn.tree._tree" and type(obj).__name__ == "Tree"


def decision_tree(obj: Any) -> None:
    """An estimator holding a Tree in ``tree_`` validates its input against ``n_features_in_``:
    the tree's n_features and n_outputs must be the estimator's."""
    tree = getattr(obj, "tree_", None)
    if not _is_tree(tree):
        return
    width = getattr(obj, "n_features_in_", None)
    require(width == tree.n_features, f"tree_ has {tree.n_features} features but the "
                                      f"estimator takes {width}")
    outputs = getattr(obj, "n_outputs_", tree.n_outputs)
    require(outputs == tree.n_outputs, f"tree_ has {tree.n_outputs} outputs but the estimator "
                                       f"declares {outputs}")


def tree_ensemble(obj: Any) -> None:
    """An ensemble of trees (forests, gradient boosting, isolation forest, bagging, AdaBoost)
    may pass its input to the trees unchecked: each tree takes at most the ensemble's width,
    and with ``estimators_features_`` at most its subset's width, subset indices in range."""
    members = getattr(obj, "estimators_", None)
    if members is None or isinstance(members, (str, bytes)):
        return
    flat = list(np.asarray(members, dtype=object).ravel()) if isinstance(members, np.ndarray) \
        else list(members) if isinstance(members, (list, tuple)) else []
    trees = [(i, m) for i, m in enumerate(flat) if _is_tree(getattr(m, "tree_", None))]
    if not trees:
        return
    width = getattr(obj, "n_features_in_", None)
    require(isinstance(width, (int, np.integer)), "a tree ensemble without n_features_in_")
    subsets = getattr(obj, "estimators_features_", None)
    if subsets is not None:
        require(len(subsets) == len(flat), f"{len(subsets)} feature subsets for {len(flat)} "
                                           "estimators")
    for i, member in trees:
        n = member.tree_.n_features
        require(n <= width, f"estimators_[{i}] takes {n} features, the ensemble {width}")
        if subsets is not None:
            cols = np.asarray(subsets[i])
            require(cols.ndim == 1 and cols.dtype.kind in "iu", f"estimators_features_[{i}] "
                                                                "is not a list of columns")
            require(((cols >= 0) & (cols < width)).all(), f"estimators_features_[{i}] has a "
                                                          "column outside the input")
            require(n <= cols.size, f"estimators_[{i}] takes {n} features but is given "
                                    f"{cols.size} columns")


def gradient_boosting(obj: Any) -> None:
    """Gradient boosting adds tree (i, k) into column k of a buffer its ``init_`` sizes:
    ``estimators_`` must be 2-D with one column per tree of an iteration, and the buffer at
    least that wide."""
    if not hasattr(obj, "_raw_predict_init") or not hasattr(obj, "estimators_"):
        return
    est = obj.estimators_
    require(isinstance(est, np.ndarray) and est.ndim == 2 and est.shape[0] >= 1,
            "estimators_ is not a 2-D array of trees")
    k = getattr(obj, "n_trees_per_iteration_", None)
    require(est.shape[1] == k, f"estimators_ has {est.shape[1]} trees per iteration, the "
                               f"model declares {k}")
    try:  # the buffer predict_stages writes into, made the way predict makes it
        first = obj._raw_predict_init(np.zeros((1, int(obj.n_features_in_)), dtype=np.float32))
    except Exception as exc:
        raise Invalid(f"its initial estimator can't make the prediction buffer ({exc})") from None
    require(first.ndim == 2 and first.shape[1] >= est.shape[1],
            f"the prediction buffer has {first.shape[-1]} columns for {est.shape[1]} trees "
            "per iteration")


def hist_gradient_boosting(obj: Any) -> None:
    """HistGradientBoosting gives every predictor its (binned-width) input and a category map
    from ``_bin_mapper``: split features below ``n_features_in_``, categorical splits on
    features the bin mapper calls categorical, one predictor per tree of an iteration."""
    predictors = getattr(obj, "_predictors", None)
    if predictors is None or not hasattr(obj, "_bin_mapper"):
        return
    if getattr(obj, "_preprocessor", None) is not None:
        raise TrustRequiredError(
            f"{type(obj).__name__} with categorical columns from the DataFrame's dtypes: unframe "
            "can't bound the width of the input its trees are given",
            "pass --trust (trust=True) only if you trust the file")
    width = int(obj.n_features_in_)
    flags = np.asarray(obj._bin_mapper.is_categorical_)
    require(flags.shape == (width,), f"the bin mapper describes {flags.size} features, the "
                                     f"model takes {width}")
    per_iteration = int(obj.n_trees_per_iteration_)
    for i, trees in enumerate(predictors):
        if len(trees) != per_iteration:
            raise Invalid(f"iteration {i} has {len(trees)} trees, expected {per_iteration}")
    nodes = [p.nodes for trees in predictors for p in trees]
    if not nodes:
        return
    split = np.concatenate([n["is_leaf"] for n in nodes]) == 0
    feature = np.concatenate([n["feature_idx"] for n in nodes])[split]
    require((feature < width).all(), f"a split reads feature {int(feature.max())} of {width}")
    cat = feature[np.concatenate([n["is_categorical"] for n in nodes])[split] == 1]
    require(flags[cat].all(), "a categorical split is on a numeric feature")


RULES: tuple[Rule, ...] = (decision_tree, tree_ensemble, gradient_boosting, hist_gradient_boosting)


def check_structure(model: Any, path: Path | str) -> None:
    for obj in _objects(model):
        for rule in RULES:
            try:
                rule(obj)
            except Invalid as exc:
                raise InputError(f"{path}: {type(obj).__name__}: {exc}", CRAFTED_HINT,
                                 details={"rule": rule.__name__}) from None


def _objects(model: Any) -> Iterator[Any]:
    """Every object reachable from the model through attributes and containers, once."""
    seen: set[int] = set()
    stack = [model]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (str, bytes, int, float, type)) or obj is None:
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set)):
            stack.extend(obj)
        elif isinstance(obj, np.ndarray):
            if obj.dtype == object:
                stack.extend(obj.ravel().tolist())
        elif hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
