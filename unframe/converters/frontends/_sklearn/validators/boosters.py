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
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unframe.converters.frontends._sklearn.validators import _skops as sk
from unframe.converters.frontends._sklearn.validators.registry import require, validates
from unframe.converters.frontends._sklearn.validators.trees import first_bad, forest_depths, in_range
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
    if not (low <= got <= high):
        raise sk.Invalid(f"{key} = {got} is outside [{low}, {high}]")
    return got


def _ints(tree: dict[str, Any], key: str, n: int) -> np.ndarray:
    arr = np.asarray(tree.get(key, []))
    if not (arr.shape == (n,) and (arr.size == 0 or arr.dtype.kind in "iub")):
        raise sk.Invalid(f"{key} is not {n} integers")
    return arr.astype(np.int64)


def _floats(tree: dict[str, Any], key: str, n: int) -> np.ndarray:
    arr = np.asarray(tree.get(key, []))
    if not (arr.shape == (n,) and (arr.size == 0 or arr.dtype.kind in "iuf")):
        raise sk.Invalid(f"{key} is not {n} numbers")
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
    if not (isinstance(trees, list) and len(trees) == n_trees):
        raise sk.Invalid(f"{n_trees} trees declared, "
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
    if trees:
        xgboost_trees(trees, n_features)
    objective = (learner.get("objective") or {}).get("name", "")
    require(isinstance(objective, str), "objective name is not a string")
    return BoosterFacts("xgboost", objective, n_features, n_classes)


XGB_NODE_FIELDS = ("left_children", "right_children", "parents", "split_indices",
                   "split_conditions", "default_left", "base_weights", "loss_changes",
                   "sum_hessian")


def xgboost_trees(trees: list[Any], n_features: int) -> None:
    """All trees at once: every node array num_nodes long; children -1 for a leaf (both) or in
    range, every node reached once from its root, no cycle, parents matching the children
    (XGBoost follows them while loading); split indices below num_feature; split conditions
    numbers, leaf values finite; categorical splits (split_type 1) with in-range category
    segments. The per-tree loop only collects arrays; the checks run on their concatenation."""
    sizes = np.empty(len(trees), dtype=np.int64)
    columns: dict[str, list[Any]] = {k: [] for k in (*XGB_NODE_FIELDS, "split_type")}
    for i, tree in enumerate(trees):
        try:
            sizes[i] = _xgboost_tree_shape(tree)
        except sk.Invalid as exc:
            raise sk.Invalid(f"tree {i}: {exc}") from None
        for key in XGB_NODE_FIELDS:
            columns[key].append(tree[key])
        columns["split_type"].append(tree.get("split_type", np.zeros(sizes[i], np.uint8)))
    c = {k: _concat(v, k, "f" if k in ("split_conditions", "base_weights", "loss_changes",
                                         "sum_hessian") else "") for k, v in columns.items()}
    offsets = np.cumsum(sizes) - sizes
    tree_of = np.repeat(np.arange(sizes.size), sizes)
    left, right = c["left_children"], c["right_children"]
    leaf = left == -1
    _first(((right == -1) != leaf), tree_of, offsets, "has one child")
    _depths(left, right, ~leaf, sizes)
    parents = c["parents"]
    _first(_scatter(tree_of.size, offsets, parents[offsets] != XGB_ROOT_PARENT), tree_of,
           offsets, "is a root with a parent")
    split = np.flatnonzero(~leaf)
    base = offsets[tree_of[split]]
    local = split - base
    _first(_scatter(tree_of.size, split, (parents[left[split] + base] != local)
                    | (parents[right[split] + base] != local)),
           tree_of, offsets, "is not the parent its children name (parents do not match)")
    index = c["split_indices"]
    _first(_scatter(tree_of.size, split, (index[split] < 0) | (index[split] >= n_features)),
           tree_of, offsets, f"splits on feature {{}}, outside [0, {n_features})", index)
    cond = c["split_conditions"]
    _first(np.isnan(cond) | (~leaf & (cond == -np.inf)) | (leaf & ~np.isfinite(cond)),
           tree_of, offsets, "has a NaN split condition or a non-finite leaf value")
    for key in ("default_left", "split_type"):
        _first((c[key] != 0) & (c[key] != 1), tree_of, offsets, f"has {key} not 0/1")
    for t in np.unique(tree_of[c["split_type"] == 1]):
        lo, hi = offsets[t], offsets[t] + sizes[t]
        try:
            _xgboost_categories(trees[t], c["split_type"][lo:hi], leaf[lo:hi])
        except sk.Invalid as exc:
            raise sk.Invalid(f"tree {t}: {exc}") from None


def _xgboost_tree_shape(tree: Any) -> int:
    require(isinstance(tree, dict) and isinstance(tree.get("tree_param"), dict), "no tree_param")
    param = tree["tree_param"]
    n = _int(param, "num_nodes", 1)
    require(_int(param, "num_deleted", 0) == 0, "deleted nodes")
    if _int(param, "size_leaf_vector", 0) > 1:
        raise _refuse("an XGBoost tree with vector leaves (multi-target)")
    for key in XGB_NODE_FIELDS:
        if not (hasattr(tree.get(key), "__len__") and len(tree[key]) == n):
            raise sk.Invalid(f"{key} is not {n} values long")
    if "split_type" in tree:
        if not (len(tree["split_type"]) == n):
            raise sk.Invalid(f"split_type is not {n} values long")
    return n


def _concat(parts: list[Any], key: str, kind: str) -> np.ndarray:
    arr = np.concatenate([np.asarray(p) for p in parts]) if parts else np.zeros(0)
    allowed = "iub" if not kind else "iuf"
    if not (arr.ndim == 1 and (arr.size == 0 or arr.dtype.kind in allowed)):
        raise sk.Invalid(f"{key} holds values that are not {'numbers' if kind else 'integers'}")
    return arr.astype(np.float64 if kind else np.int64)


def _scatter(n: int, where: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = np.zeros(n, dtype=bool)
    out[where] = values
    return out


def _first(bad: np.ndarray, tree_of: np.ndarray, offsets: np.ndarray, what: str,
           values: np.ndarray | None = None) -> None:
    """``first_bad``, the tree named in the message (a booster is one object of many trees)."""
    _named(first_bad, bad, tree_of, offsets, what, values)


def _depths(left: np.ndarray, right: np.ndarray, internal: np.ndarray, sizes: np.ndarray) -> None:
    _named(forest_depths, left, right, internal, sizes)


def _named(check: Any, *args: Any) -> Any:
    try:
        return check(*args)
    except sk.Invalid as exc:
        raise sk.Invalid(f"tree {exc.index}: {exc}") from None


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
    """The buffer XGBoost unserializes, read strictly as UBJSON (or JSON) before XGBoost sees it:
    gbtree or dart; tree_info below the number of outputs; per tree, node arrays of num_nodes,
    children in range (-1 for a leaf), every node reached once from the root, no cycle, parents
    matching the children, split indices below num_feature, split conditions numbers, leaf
    values finite, category segments inside the category list; the configuration's num_feature,
    num_class, num_target and booster equal to the model's. gblinear, vector leaves and
    categorical re-coding tables need --trust."""
    state = sk.object_state(node, "Booster")
    if not (set(state) <= {"handle", "feature_names", "feature_types", "best_iteration",
                           "best_score"}):
        raise sk.Invalid(f"Booster's state has keys {sorted(state)}")
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
        if not (str(theirs.get(key, mine.get(key))) == str(mine.get(key))):
            raise sk.Invalid(f"the configuration's {key} differs from the model's")
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


_NUMBER = r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
FINITE_NUMBERS = re.compile(rf"(?:{_NUMBER}(?: {_NUMBER})*)?")


def lightgbm_text(text: str) -> BoosterFacts:
    """A text model (``model_to_string``): header keys once each, num_tree_per_iteration equal
    to num_class, feature_names and feature_infos one per feature; tree_sizes locating exactly
    the tree blocks LightGBM will read (it jumps by those byte offsets); every tree block as
    ``lightgbm_trees`` checks it."""
    require("\x00" not in text and "\r" not in text, "the model text holds NUL or CR characters")
    require(text.startswith("tree\n"), "not a LightGBM text model (no 'tree' header)")
    start = text.find("\nTree=")
    require(start >= 0, "the model has no trees")
    header = _lgbm_header(text[:start + 1])
    n_features = int(_lgbm_number(header, "max_feature_idx", 0, MAX_FEATURES - 1)) + 1
    n_class = int(_lgbm_number(header, "num_class", 1, 2**20))
    per_iteration = int(_lgbm_number(header, "num_tree_per_iteration", 1, 2**20))
    if per_iteration != n_class:
        raise sk.Invalid(f"num_tree_per_iteration {per_iteration} differs from "
                         f"num_class {n_class}")
    for key in ("feature_names", "feature_infos"):
        if not (len(header.get(key, "").split(" ")) == n_features):
            raise sk.Invalid(f"{key} is not one per feature")
    require("tree_sizes" in header, "tree_sizes is missing (a LightGBM 2 model: re-save it)")
    try:
        sizes = [int(v) for v in header["tree_sizes"].split(" ")] if header["tree_sizes"] else []
    except ValueError:
        raise sk.Invalid("tree_sizes holds a value that is not an integer") from None
    body = text.encode("utf-8")[len(text[:start + 1].encode("utf-8")):]
    require(sum(sizes) <= len(body), "tree_sizes point past the end of the model")
    blocks, offset = [], 0
    for size in sizes:
        require(size > 0, "a tree size is not positive")
        blocks.append(body[offset:offset + size].decode("utf-8", errors="strict"))
        offset += size
    if blocks:
        lightgbm_trees(blocks, n_features)
    return BoosterFacts("lightgbm", header.get("objective", "").split(" ")[0], n_features,
                        n_class if n_class > 1 else 0, {"n_trees": len(sizes)})


def _lgbm_header(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.split("\n")[1:]:
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not (sep and ("=" not in value or key == "feature_names")):
            raise sk.Invalid(f"header line {line[:60]!r} is not key=value")
        if not (key not in out):
            raise sk.Invalid(f"header key {key!r} appears twice")
        out[key] = value
    return out


def _lgbm_number(header: dict[str, str], key: str, low: float, high: float) -> float:
    try:
        got = float(header[key])
    except (KeyError, ValueError):
        raise sk.Invalid(f"{key} is missing or not a number") from None
    if not (low <= got <= high and got == int(got)):
        raise sk.Invalid(f"{key} = {header[key]} is out of range")
    return got


def lightgbm_trees(blocks: list[str], n_features: int) -> None:
    """Every ``Tree=i`` block: known keys once each, arrays of the declared lengths; children
    (>= 0 a split, < 0 the complement of a leaf) in range, every split and leaf reached once
    from the root, no cycle; split features below max_feature_idx + 1; decision types of
    LightGBM's bits; thresholds and leaf values finite numbers; categorical splits indexing
    cat_boundaries, which stay inside cat_threshold; linear trees refused. The per-tree loop
    reads the text; the checks run on all trees' arrays at once."""
    fields = [_lgbm_fields(block, i) for i, block in enumerate(blocks)]
    leaves = np.array([f["num_leaves"] for f in fields], dtype=np.int64)
    splits = leaves - 1
    for key, count in (("left_child", splits), ("right_child", splits),
                       ("split_feature", splits), ("decision_type", splits),
                       ("threshold", splits), ("leaf_value", leaves)):
        for i, f in enumerate(fields):
            raw = f.get(key, "")
            got = raw.count(" ") + 1 if raw else 0
            if got != count[i]:
                raise sk.Invalid(f"tree {i}: {key} has {got} values, expected {count[i]}")
            if key in ("threshold", "leaf_value"):
                if not (FINITE_NUMBERS.fullmatch(raw)):
                    raise sk.Invalid(f"tree {i}: {key} holds a value that is "
                                     "not a finite number")
    ints = {key: _lgbm_ints(fields, key, int(splits.sum()))
            for key in ("left_child", "right_child", "split_feature", "decision_type")}
    _lgbm_links(ints["left_child"], ints["right_child"], splits)
    tree_of = np.repeat(np.arange(len(fields)), splits)
    offsets = np.cumsum(splits) - splits
    feature = ints["split_feature"]
    _first((feature < 0) | (feature >= n_features), tree_of, offsets,
           f"splits on feature {{}}, outside [0, {n_features})", feature)
    decision = ints["decision_type"]
    _first((decision < 0) | (decision >= 16) | ((decision >> 2) == 3), tree_of, offsets,
           "has a decision type with unknown bits")
    for t in sorted({*np.unique(tree_of[(decision & 1) == 1]).tolist(),
                     *(i for i, f in enumerate(fields) if f["num_cat"])}):
        try:
            lo = offsets[t]
            threshold = np.array(fields[t]["threshold"].split(" "), dtype=np.float64)
            _lgbm_categories(fields[t], fields[t]["num_cat"],
                             threshold[(decision[lo:lo + splits[t]] & 1) == 1])
        except sk.Invalid as exc:
            raise sk.Invalid(f"tree {t}: {exc}") from None


def _lgbm_fields(block: str, index: int) -> dict[str, Any]:
    head, _, rest = block.partition("\n")
    if not (head == f"Tree={index}"):
        raise sk.Invalid(f"block {index} starts with {head[:30]!r}, expected "
                         f"Tree={index}")
    lines, _, tail = rest.partition("\n\n")
    if not (tail.strip("\n") == ""):
        raise sk.Invalid(f"tree {index}: text after the tree's blank line inside its "
                         "tree_sizes span")
    fields: dict[str, Any] = {}
    for line in lines.split("\n"):
        key, sep, value = line.partition("=")
        if not (sep and "=" not in value and key in LGBM_TREE_KEYS):
            raise sk.Invalid(f"tree {index}: line {line[:60]!r} is not a known key=value")
        if not (key not in fields):
            raise sk.Invalid(f"tree {index}: key {key!r} appears twice")
        fields[key] = value
    if fields.get("is_linear", "0") != "0":
        raise _refuse("a LightGBM model with linear trees")
    for key, high in (("num_leaves", 2**31 - 1), ("num_cat", 2**31 - 1)):
        try:
            fields[key] = int(fields.get(key, ""))
        except ValueError:
            raise sk.Invalid(f"tree {index}: {key} is missing or not an integer") from None
        if not ((1 if key == "num_leaves" else 0) <= fields[key] <= high):
            raise sk.Invalid(f"tree {index}: {key} = {fields[key]} is out of range")
    return fields


def _lgbm_ints(fields: list[dict[str, Any]], key: str, total: int) -> np.ndarray:
    """All trees' ``key`` values as one array (numpy's C parser; LightGBM's writes single
    spaces, so the value count was checked per tree from the separators)."""
    joined = " ".join(f[key] for f in fields if f.get(key))
    try:
        values = np.fromstring(joined, dtype=np.int64, sep=" ") if joined else np.zeros(0, np.int64)
    except ValueError:
        raise sk.Invalid(f"{key} holds a value that is not an integer") from None
    require(values.size == total, f"{key} holds a value that is not an integer")
    return values


def _lgbm_links(left: np.ndarray, right: np.ndarray, splits: np.ndarray) -> None:
    """Tree t's leaves become its nodes m..2m (m = its splits), so ``forest_depths`` applies:
    all trees are checked at once."""
    m = np.repeat(splits, splits)  # each split's tree's split count
    tree_of = np.repeat(np.arange(splits.size), splits)
    offsets = np.cumsum(splits) - splits
    for child in (left, right):
        _first((child >= m) | (child < -(m + 1)), tree_of, offsets,
               "has child index {}, out of range", child)
    sizes = 2 * splits + 1
    starts = np.cumsum(sizes) - sizes
    n = int(sizes.sum())
    internal = np.zeros(n, dtype=bool)
    position = starts[tree_of] + (np.arange(m.size) - offsets[tree_of])  # split s of tree t
    internal[position] = True
    full_left = np.zeros(n, dtype=np.int64)
    full_right = np.zeros(n, dtype=np.int64)
    full_left[position] = np.where(left >= 0, left, m - left - 1)
    full_right[position] = np.where(right >= 0, right, m - right - 1)
    _depths(full_left, full_right, internal, sizes)


def _lgbm_categories(fields: dict[str, Any], n_cat: int, cat_index: np.ndarray) -> None:
    bounds = _lgbm_array(fields, "cat_boundaries", n_cat + 1)
    words = _lgbm_array(fields, "cat_threshold", int(bounds[-1]) if bounds.size else 0)
    require(bounds[0] == 0 and (np.diff(bounds) >= 0).all(), "cat_boundaries are not ordered")
    require(((words >= 0) & (words < 2**32)).all(), "cat_threshold words are not uint32")
    require((cat_index == np.floor(cat_index)).all(), "a categorical threshold is not an index")
    in_range(cat_index.astype(np.int64), 0, n_cat, "categorical split index")


def _lgbm_array(fields: dict[str, Any], key: str, n: int) -> np.ndarray:
    raw = fields.get(key, "")
    try:
        values = [int(v) for v in raw.split(" ")] if raw else []
    except ValueError:
        raise sk.Invalid(f"{key} holds a value that is not an integer") from None
    if not (len(values) == n):
        raise sk.Invalid(f"{key} has {len(values)} values, expected {n}")
    return np.asarray(values, dtype=np.int64)


@validates("lightgbm.basic.Booster")
def lightgbm_booster(node: Any) -> None:
    """The text model in ``_handle``, read as LightGBM will: header keys once each,
    num_tree_per_iteration equal to num_class, tree_sizes locating exactly the tree blocks; per
    tree, known keys once each, arrays of num_leaves - 1 splits and num_leaves leaves, children
    in range, every split and leaf reached once from the root, no cycle, split features below
    max_feature_idx + 1, decision types of known bits, thresholds and leaf values finite,
    categorical splits inside cat_boundaries and cat_threshold. Linear trees need --trust."""
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
