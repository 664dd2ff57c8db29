"""XGBoost and LightGBM: their boosters and scikit-learn wrappers, through the boosters' own model
formats (never pickle).

skops stores an XGBoost ``Booster`` as the UBJSON buffer ``Booster.__getstate__`` makes
(``{"Config": ..., "Model": ...}``) and a LightGBM ``Booster`` as its text model (``_handle``);
building either hands that buffer to the library's C++ loader, which trusts the tree arrays:
XGBoost reads ``nodes[parent]`` while loading and both walk children and feature indices
without bounds checks when predicting. The same checks serve ``.json``/``.ubj`` XGBoost files
and ``.txt`` LightGBM files given directly (``xgboost_document``, ``lightgbm_text``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unframe.converters.frontends._sklearn.validators import _skops as sk
from unframe.converters.frontends._sklearn.validators import require, validates
from unframe.converters.frontends._sklearn.validators.trees import finite_or_inf, in_range, tree_depths
from unframe.errors import TrustRequiredError

XGB_ROOT_PARENT = 2147483647  # XGBoost's parent of the root (kInvalidNodeId as stored)
MAX_FEATURES = 2**31 - 1
MAX_CATEGORY = 2**24  # XGBoost sizes a category bitset by the largest category


@dataclass
class BoosterFacts:
    """What the wrapper needs from a validated model."""

    library: str
    objective: str
    n_features: int
    n_classes: int  # 0 for a regressor
    extra: dict[str, Any] = field(default_factory=dict)


def _refuse(what: str) -> TrustRequiredError:
    return TrustRequiredError(f"{what}: unframe does not validate this kind of model",
                              "pass --trust (trust=True) only if you trust the file")


# --- XGBoost ----------------------------------------------------------------------------------

def _int(doc: dict[str, Any], key: str, low: int = 0, high: int = MAX_FEATURES) -> int:
    raw = doc.get(key)
    try:
        got = int(raw)  # XGBoost writes parameters as strings
    except (TypeError, ValueError):
        raise sk.Invalid(f"{key} is {raw!r}, expected an integer") from None
    require(low <= got <= high, f"{key} = {got} is outside [{low}, {high}]")
    return got


def _ints(tree: dict[str, Any], key: str, n: int) -> np.ndarray:
    arr = np.asarray(tree.get(key, []))
    require(arr.shape == (n,) and (arr.size == 0 or arr.dtype.kind in "iub"),
            f"{key} is not {n} integers")
    return arr.astype(np.int64)


def _floats(tree: dict[str, Any], key: str, n: int) -> np.ndarray:
    arr = np.asarray(tree.get(key, []))
    require(arr.shape == (n,) and (arr.size == 0 or arr.dtype.kind in "iuf"),
            f"{key} is not {n} numbers")
    return arr.astype(np.float64)


def xgboost_document(doc: Any) -> BoosterFacts:
    """A model document (``save_model``'s JSON/UBJSON, or the ``Model`` of a serialized booster):
    gbtree or dart; num_trees trees with tree_info (the output each adds to) below the number of
    outputs and iteration_indptr a partition of them; each tree as ``xgboost_tree`` checks it."""
    require(isinstance(doc, dict) and isinstance(doc.get("learner"), dict),
            "not an XGBoost model (no learner)")
    learner = doc["learner"]
    param = learner.get("learner_model_param")
    require(isinstance(param, dict), "learner_model_param is missing")
    n_features = _int(param, "num_feature", 1)
    n_classes = _int(param, "num_class", 0, 2**20)
    n_targets = _int(param, "num_target", 1, 2**20) if "num_target" in param else 1
    booster = learner.get("gradient_booster")
    require(isinstance(booster, dict), "gradient_booster is missing")
    if booster.get("name") == "dart":
        model = (booster.get("gbtree") or {}).get("model")
    elif booster.get("name") == "gbtree":
        model = booster.get("model")
    else:
        raise _refuse(f"an XGBoost {booster.get('name')!r} booster")
    require(isinstance(model, dict), "the tree model is missing")
    n_trees = _int(model.get("gbtree_model_param") or {}, "num_trees", 0)
    trees = model.get("trees")
    require(isinstance(trees, list) and len(trees) == n_trees, f"{n_trees} trees declared, "
                                                              f"{len(trees or [])} stored")
    info = _ints(model, "tree_info", n_trees)
    in_range(info, 0, max(1, n_classes, n_targets), "tree_info (output index)")
    if "iteration_indptr" in model:
        ptr = np.asarray(model["iteration_indptr"])
        require(ptr.ndim == 1 and ptr.size >= 1 and ptr.dtype.kind in "iu" and ptr[0] == 0
                and ptr[-1] == n_trees and (np.diff(ptr) >= 0).all(),
                "iteration_indptr does not partition the trees")
    cats = model.get("cats") or {}
    if any(len(v) for v in cats.values() if hasattr(v, "__len__")):
        raise _refuse("an XGBoost model with a categorical re-coding table")
    if booster.get("name") == "dart":
        drop = _floats(booster, "weight_drop", n_trees)
        require(np.isfinite(drop).all(), "weight_drop holds NaN or infinity")
    for i, tree in enumerate(trees):
        try:
            xgboost_tree(tree, n_features)
        except sk.Invalid as exc:
            raise sk.Invalid(f"tree {i}: {exc}") from None
    objective = (learner.get("objective") or {}).get("name", "")
    require(isinstance(objective, str), "objective name is not a string")
    return BoosterFacts("xgboost", objective, n_features, n_classes)


def xgboost_tree(tree: Any, n_features: int) -> None:
    """One tree: all node arrays num_nodes long; children -1 for a leaf (both) or in range,
    every node reached once from the root, no cycle, parents matching the children (XGBoost
    follows them while loading); split indices below num_feature; split conditions numbers;
    leaf values finite; categorical splits (split_type 1) with in-range category segments."""
    require(isinstance(tree, dict) and isinstance(tree.get("tree_param"), dict), "no tree_param")
    param = tree["tree_param"]
    n = _int(param, "num_nodes", 1)
    require(_int(param, "num_deleted", 0) == 0, "deleted nodes")
    if _int(param, "size_leaf_vector", 0) > 1:
        raise _refuse("an XGBoost tree with vector leaves (multi-target)")
    left, right = _ints(tree, "left_children", n), _ints(tree, "right_children", n)
    leaf = left == -1
    require(((right == -1) == leaf).all(), "a node has one child")
    tree_depths(left, right, ~leaf)
    parents = _ints(tree, "parents", n)
    require(parents[0] == XGB_ROOT_PARENT, f"the root's parent is {parents[0]}")
    split = np.flatnonzero(~leaf)
    require((parents[left[split]] == split).all() and (parents[right[split]] == split).all(),
            "parents do not match the children")
    in_range(_ints(tree, "split_indices", n)[split], 0, n_features, "split index")
    cond = _floats(tree, "split_conditions", n)
    finite_or_inf(cond[split], "split condition")
    require(np.isfinite(cond[leaf]).all(), "a leaf value is NaN or infinite")
    require(np.isin(_ints(tree, "default_left", n), (0, 1)).all(), "default_left is not 0/1")
    for key in ("base_weights", "loss_changes", "sum_hessian"):
        _floats(tree, key, n)
    split_type = _ints(tree, "split_type", n) if "split_type" in tree else np.zeros(n, np.int64)
    require(np.isin(split_type, (0, 1)).all(), "split_type is not 0/1")
    _xgboost_categories(tree, split_type, leaf)


def _xgboost_categories(tree: dict[str, Any], split_type: np.ndarray, leaf: np.ndarray) -> None:
    cat_nodes = np.flatnonzero(split_type == 1)
    require(not leaf[cat_nodes].any(), "a leaf is marked as a categorical split")
    nodes = np.asarray(tree.get("categories_nodes", []), dtype=np.int64)
    require(np.array_equal(np.sort(nodes), cat_nodes), "categories_nodes are not the "
                                                       "categorical splits")
    k = nodes.size
    segments = _ints(tree, "categories_segments", k)
    sizes = _ints(tree, "categories_sizes", k)
    cats = np.asarray(tree.get("categories", []))
    require(cats.ndim == 1 and (cats.size == 0 or cats.dtype.kind in "iu"), "categories are "
                                                                           "not integers")
    require(((segments >= 0) & (sizes >= 0) & (segments + sizes <= cats.size)).all(),
            "a category segment is outside the category list")
    in_range(cats, 0, MAX_CATEGORY, "category")


@validates("xgboost.core.Booster")
def xgboost_booster(node: Any) -> None:
    """The buffer XGBoost unserializes: UBJSON (or JSON) ``{"Config", "Model"}``, read strictly;
    the model as ``xgboost_document`` checks it, and the configuration's model parameters (which
    XGBoost loads after the model) equal to the model's."""
    state = sk.object_state(node, "Booster")
    require(set(state) <= {"handle", "feature_names", "feature_types", "best_iteration",
                           "best_score"}, f"Booster's state has keys {sorted(state)}")
    require("handle" in state, "the Booster has no model")
    if sk.is_none(state["handle"]):
        return
    parsed = parse_xgboost(sk.raw_bytes(state["handle"], "handle"))
    require(isinstance(parsed, dict) and set(parsed) == {"Config", "Model"},
            "not a serialized XGBoost booster (expected Config and Model)")
    xgboost_document(parsed["Model"])
    config = (parsed["Config"] or {}).get("learner") or {}
    mine = parsed["Model"]["learner"]["learner_model_param"]
    theirs = config.get("learner_model_param") or {}
    for key in ("num_feature", "num_class", "num_target"):
        require(str(theirs.get(key, mine.get(key))) == str(mine.get(key)),
                f"the configuration's {key} differs from the model's")
    name = (config.get("gradient_booster") or {}).get("name")
    require(name == parsed["Model"]["learner"]["gradient_booster"]["name"],
            "the configuration's booster differs from the model's")


def parse_xgboost(raw: bytes) -> Any:
    """XGBoost's model bytes: UBJSON (``{`` then a type marker) or JSON text, strictly."""
    from unframe.converters.frontends._sklearn.validators.ubjson import UBJSONError, loads

    if raw[:2] in (b'{"', b"{ ", b"{\n", b"{}") or raw[:1] in (b" ", b"\n"):
        try:
            return json.loads(raw, object_pairs_hook=_no_repeats)
        except (ValueError, RecursionError) as exc:
            raise sk.Invalid(f"unreadable XGBoost JSON ({str(exc)[:80]})") from None
    if raw[:1] != b"{":
        raise _refuse("an XGBoost model in the old binary format")
    try:
        return loads(raw)
    except UBJSONError as exc:
        raise sk.Invalid(f"unreadable XGBoost UBJSON ({exc})") from None


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    require(len(out) == len(pairs), "a JSON object repeats a key")
    return out


# --- LightGBM ---------------------------------------------------------------------------------

# The keys a LightGBM 4 tree block may hold (its reader takes at most this many lines).
LGBM_TREE_KEYS = ("num_leaves", "num_cat", "split_feature", "split_gain", "threshold",
                  "decision_type", "left_child", "right_child", "leaf_value", "leaf_weight",
                  "leaf_count", "internal_value", "internal_weight", "internal_count",
                  "cat_boundaries", "cat_threshold", "is_linear", "shrinkage", "leaf_const",
                  "num_features", "leaf_features", "leaf_coeff")


def lightgbm_text(text: str) -> BoosterFacts:
    """A text model (``model_to_string``): header keys once each, num_tree_per_iteration equal
    to num_class, feature_names and feature_infos one per feature; tree_sizes locating exactly
    the tree blocks LightGBM will read (it jumps by those byte offsets); each tree as
    ``lightgbm_tree`` checks it."""
    require("\x00" not in text and "\r" not in text, "the model text holds NUL or CR characters")
    require(text.startswith("tree\n"), "not a LightGBM text model (no 'tree' header)")
    start = text.find("\nTree=")
    require(start >= 0, "the model has no trees")
    header = _lgbm_header(text[:start + 1])
    n_features = int(_lgbm_number(header, "max_feature_idx", 0, MAX_FEATURES - 1)) + 1
    n_class = int(_lgbm_number(header, "num_class", 1, 2**20))
    per_iteration = int(_lgbm_number(header, "num_tree_per_iteration", 1, 2**20))
    require(per_iteration == n_class, f"num_tree_per_iteration {per_iteration} differs from "
                                      f"num_class {n_class}")
    for key in ("feature_names", "feature_infos"):
        require(len(header.get(key, "").split(" ")) == n_features, f"{key} is not one per feature")
    require("tree_sizes" in header, "tree_sizes is missing (a LightGBM 2 model: re-save it)")
    sizes = [int(s) for s in header["tree_sizes"].split(" ") if s] if header["tree_sizes"] else []
    body = text.encode("utf-8")[len(text[:start + 1].encode("utf-8")):]
    require(sum(sizes) <= len(body), "tree_sizes point past the end of the model")
    offset = 0
    for i, size in enumerate(sizes):
        require(size > 0, "a tree size is not positive")
        block = body[offset:offset + size].decode("utf-8", errors="strict")
        offset += size
        try:
            lightgbm_tree(block, i, n_features)
        except sk.Invalid as exc:
            raise sk.Invalid(f"tree {i}: {exc}") from None
    return BoosterFacts("lightgbm", header.get("objective", "").split(" ")[0], n_features,
                        n_class if n_class > 1 else 0, {"n_trees": len(sizes)})


def _lgbm_header(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.split("\n")[1:]:
        if not line:
            continue
        key, sep, value = line.partition("=")
        require(sep and ("=" not in value or key == "feature_names"),
                f"header line {line[:60]!r} is not key=value")
        require(key not in out, f"header key {key!r} appears twice")
        out[key] = value
    return out


def _lgbm_number(header: dict[str, str], key: str, low: float, high: float) -> float:
    try:
        got = float(header[key])
    except (KeyError, ValueError):
        raise sk.Invalid(f"{key} is missing or not a number") from None
    require(low <= got <= high and got == int(got), f"{key} = {header[key]} is out of range")
    return got


def lightgbm_tree(block: str, index: int, n_features: int) -> None:
    """One ``Tree=i`` block: known keys once each, arrays of the declared lengths; children
    (>= 0 a split, < 0 the complement of a leaf) in range, every split and leaf reached once
    from the root, no cycle; split features below max_feature_idx + 1; decision types of
    LightGBM's bits; numeric thresholds and leaf values finite; categorical splits indexing
    cat_boundaries, which stay inside cat_threshold; linear trees refused."""
    head, _, rest = block.partition("\n")
    require(head == f"Tree={index}", f"block starts with {head[:30]!r}, expected Tree={index}")
    lines, _, tail = rest.partition("\n\n")
    require(tail.strip("\n") == "", "text after the tree's blank line inside its tree_sizes span")
    fields: dict[str, str] = {}
    for line in lines.split("\n"):
        key, sep, value = line.partition("=")
        require(sep and "=" not in value and key in LGBM_TREE_KEYS,
                f"line {line[:60]!r} is not a known key=value")
        require(key not in fields, f"key {key!r} appears twice")
        fields[key] = value
    if fields.get("is_linear", "0") != "0":
        raise _refuse("a LightGBM model with linear trees")
    n_leaves = int(_lgbm_array(fields, "num_leaves", 1, int)[0])
    require(1 <= n_leaves <= 2**31 - 1, f"num_leaves {n_leaves}")
    values = _lgbm_array(fields, "leaf_value", n_leaves, float)
    require(np.isfinite(values).all(), "a leaf value is NaN or infinite")
    n_cat = int(_lgbm_array(fields, "num_cat", 1, int)[0])
    m = n_leaves - 1
    if m == 0:
        return
    left = _lgbm_array(fields, "left_child", m, int)
    right = _lgbm_array(fields, "right_child", m, int)
    _lgbm_links(left, right, m, n_leaves)
    in_range(_lgbm_array(fields, "split_feature", m, int), 0, n_features, "split feature")
    decision = _lgbm_array(fields, "decision_type", m, int)
    require(((decision >= 0) & (decision < 16) & ((decision >> 2) != 3)).all(),
            "a decision type has unknown bits")
    threshold = _lgbm_array(fields, "threshold", m, float)
    require(np.isfinite(threshold).all(), "a threshold is NaN or infinite")
    categorical = (decision & 1) == 1
    if categorical.any() or n_cat:
        _lgbm_categories(fields, n_cat, threshold[categorical])


def _lgbm_array(fields: dict[str, str], key: str, n: int, kind: type) -> np.ndarray:
    raw = fields.get(key, "")
    try:
        values = [kind(v) for v in raw.split(" ")] if raw else []
    except ValueError:
        raise sk.Invalid(f"{key} holds a value that is not a number") from None
    require(len(values) == n, f"{key} has {len(values)} values, expected {n}")
    return np.asarray(values, dtype=np.int64 if kind is int else np.float64)


def _lgbm_links(left: np.ndarray, right: np.ndarray, m: int, n_leaves: int) -> None:
    """Leaves become nodes m..m+n_leaves-1 of one tree, so the shared checker applies."""
    def node(child: np.ndarray) -> np.ndarray:
        require(((child < m) & (child >= -n_leaves)).all(), "a child index is out of range")
        return np.where(child >= 0, child, m + (-child - 1))

    n = m + n_leaves
    internal = np.zeros(n, dtype=bool)
    internal[:m] = True
    full_left = np.zeros(n, dtype=np.int64)
    full_right = np.zeros(n, dtype=np.int64)
    full_left[:m], full_right[:m] = node(left), node(right)
    tree_depths(full_left, full_right, internal)


def _lgbm_categories(fields: dict[str, str], n_cat: int, cat_index: np.ndarray) -> None:
    bounds = _lgbm_array(fields, "cat_boundaries", n_cat + 1, int)
    words = _lgbm_array(fields, "cat_threshold", bounds[-1] if bounds.size else 0, int)
    require(bounds[0] == 0 and (np.diff(bounds) >= 0).all(), "cat_boundaries are not ordered")
    require(((words >= 0) & (words < 2**32)).all(), "cat_threshold words are not uint32")
    require((cat_index == np.floor(cat_index)).all(), "a categorical threshold is not an index")
    in_range(cat_index.astype(np.int64), 0, n_cat, "categorical split index")


@validates("lightgbm.basic.Booster")
def lightgbm_booster(node: Any) -> None:
    """The text model in ``_handle`` (what LightGBM's loader reads), as ``lightgbm_text``
    checks it."""
    state = sk.object_state(node, "Booster")
    require("handle" not in state, "the Booster has a 'handle' entry (LightGBM reads '_handle')")
    require("_handle" in state, "the Booster has no model")
    if sk.is_none(state["_handle"]):
        return
    text = sk.value(state["_handle"])
    require(isinstance(text, str), "the Booster's model is not text")
    lightgbm_text(text)


@validates("xgboost.sklearn.XGBClassifier", "xgboost.sklearn.XGBRegressor",
           "xgboost.sklearn.XGBRFClassifier", "xgboost.sklearn.XGBRFRegressor",
           "lightgbm.sklearn.LGBMClassifier", "lightgbm.sklearn.LGBMRegressor")
def booster_wrapper(node: Any) -> None:
    """The scikit-learn wrapper: built the data-only way (``__new__`` and its attributes; the
    booster it holds is validated as its own type)."""
    sk.object_state(node, node.class_name)
