"""Loading scikit-learn models from files.

- ``.skops``: the default. Without ``trust``, the types skops does not trust by default are
  loaded only when unframe validates their content first (``validators/``); any other is
  refused by name. With ``trust``, skops loads every type the file declares, unchecked.
- XGBoost ``.json``/``.ubj`` and LightGBM ``.txt`` models: validated the same way (their own
  formats run no code), loaded from the very bytes checked, wrapped in the scikit-learn API.
- ``.pkl`` / ``.joblib``: unpickling runs code from the file, so only with ``trust``.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from unframe.errors import InputError, TrustRequiredError, UnsupportedError

PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib")
XGBOOST_SUFFIXES = (".json", ".ubj")
LIGHTGBM_SUFFIXES = (".txt",)


def load_file(path: Path, trust: bool) -> Any:
    if not path.is_file():
        raise InputError(f"{path}: no such file", "check the path")
    suffix = path.suffix.lower()
    if suffix == ".skops":
        return load_skops(path, trust)
    if suffix in PICKLE_SUFFIXES:
        return load_pickle(path, trust)
    if suffix in XGBOOST_SUFFIXES:
        return load_xgboost(path)
    if suffix in LIGHTGBM_SUFFIXES:
        return load_lightgbm(path)
    raise InputError(f"{path}: not a scikit-learn model file (suffix {suffix or 'none'})",
                     "use a .skops, .pkl or .joblib file, or an XGBoost .json/.ubj or LightGBM "
                     ".txt model")


def booster_kind(path: Path) -> str | None:
    """"xgboost" or "lightgbm" when the file's first bytes are those libraries' model formats
    (a cheap look, no import), else None: .json and .txt are claimed only then."""
    suffix = path.suffix.lower()
    if suffix not in XGBOOST_SUFFIXES + LIGHTGBM_SUFFIXES:
        return None
    try:
        with path.open("rb") as fh:
            head = fh.read(64)
    except OSError:
        return None
    if suffix in LIGHTGBM_SUFFIXES:
        return "lightgbm" if head.startswith(b"tree\nversion=") else None
    return "xgboost" if head.startswith(b"{") and b"learner" in head else None


def load_skops(path: Path, trust: bool) -> Any:
    if not trust:
        from unframe.converters.frontends._sklearn.validators import load_validated

        return load_validated(path)
    import skops.io as sio

    from unframe import archives

    archives.check_zip(path, "skops archive")  # entries escaping it, duplicates, zip bombs
    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as exc:
        raise InputError(f"{path}: not a readable skops file ({_first_line(exc)})",
                         "check that the file is complete and was written by skops.io.dump") from None
    try:
        return sio.load(path, trusted=list(untrusted) or None)
    except Exception as exc:
        raise InputError(f"{path}: skops could not load it ({_first_line(exc)})",
                         "check that the file is complete and matches this scikit-learn") from None


def load_xgboost(path: Path) -> Any:
    """An XGBoost model file, validated, as an XGBClassifier or XGBRegressor (by objective)."""
    from unframe.converters.frontends._sklearn.validators import boosters

    raw, facts = _read_checked(path, lambda data: boosters.xgboost_document(
        boosters.parse_xgboost(data)))
    import xgboost

    wrapper = _wrapper_for(path, facts.objective, {"binary:": xgboost.XGBClassifier,
                                                   "multi:": xgboost.XGBClassifier,
                                                   "reg:": xgboost.XGBRegressor,
                                                   "count:": xgboost.XGBRegressor})
    model = wrapper()
    try:
        model.load_model(bytearray(raw))  # the bytes validated, not a second read of the file
    except Exception as exc:
        raise InputError(f"{path}: XGBoost could not load it ({_first_line(exc)})",
                         "check that the file matches the installed xgboost") from None
    return model


def load_lightgbm(path: Path) -> Any:
    """A LightGBM text model, validated, as an LGBMClassifier or LGBMRegressor (by objective)."""
    from unframe.converters.frontends._sklearn.validators import boosters

    raw, facts = _read_checked(path, lambda data: boosters.lightgbm_text(data.decode("utf-8")))
    text = raw.decode("utf-8")
    import lightgbm

    wrapper = _wrapper_for(path, facts.objective, {
        "binary": lightgbm.LGBMClassifier, "multiclass": lightgbm.LGBMClassifier,
        "multiclassova": lightgbm.LGBMClassifier, "regression": lightgbm.LGBMRegressor,
        "huber": lightgbm.LGBMRegressor, "fair": lightgbm.LGBMRegressor,
        "poisson": lightgbm.LGBMRegressor, "quantile": lightgbm.LGBMRegressor,
        "mape": lightgbm.LGBMRegressor, "gamma": lightgbm.LGBMRegressor,
        "tweedie": lightgbm.LGBMRegressor})
    try:
        booster = lightgbm.Booster(model_str=text)
    except Exception as exc:
        raise InputError(f"{path}: LightGBM could not load it ({_first_line(exc)})",
                         "check that the file matches the installed lightgbm") from None
    return wrap_lightgbm(wrapper, booster, facts)


def wrap_lightgbm(wrapper: type, booster: Any, facts: Any) -> Any:
    """The scikit-learn wrapper around a loaded booster, with the attributes ``fit`` sets."""
    import numpy as np

    model = wrapper(objective=facts.objective)
    model._Booster = booster
    model._n_features = model._n_features_in = facts.n_features
    model._objective = facts.objective
    model._evals_result, model._best_score, model._best_iteration = {}, {}, booster.best_iteration
    model._fitted_with_feature_names = False
    if facts.n_classes or facts.objective == "binary":
        from lightgbm.compat import _LGBMLabelEncoder

        classes = np.arange(max(2, facts.n_classes))
        model._le = _LGBMLabelEncoder().fit(classes)
        model._classes, model._n_classes = model._le.classes_, len(classes)
        model._class_map = {c: c for c in classes.tolist()}
    model.fitted_ = True
    return model


def _read_checked(path: Path, check: Any) -> tuple[bytes, Any]:
    """The file's bytes, read once, and what ``check`` found in them."""
    from unframe.converters.frontends._sklearn.validators import CRAFTED_HINT, Invalid

    data = path.read_bytes()
    if not data:
        raise InputError(f"{path}: the file is empty", "check the path")
    try:
        return data, check(data)
    except Invalid as exc:
        raise InputError(f"{path}: {exc}", CRAFTED_HINT.replace("skops.io.dump", "the library's "
                                                                "save_model")) from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise InputError(f"{path}: unreadable model ({_first_line(exc)})",
                         "check that the file is complete") from None


def _wrapper_for(path: Path, objective: str, by_prefix: dict[str, type]) -> type:
    for prefix, wrapper in by_prefix.items():
        if objective == prefix or (prefix.endswith(":") and objective.startswith(prefix)):
            return wrapper
    raise UnsupportedError(f"{path}: objective {objective!r} has no scikit-learn wrapper unframe "
                           "converts", "convert a classifier or regressor model")


def load_pickle(path: Path, trust: bool) -> Any:
    if not trust:
        raise TrustRequiredError(
            f"{path} is a pickle: loading it runs code stored in the file",
            "save the model with skops.io.dump instead, or pass --trust (trust=True) "
            "if you trust the file")
    try:
        if path.suffix.lower() == ".joblib":
            import joblib

            return joblib.load(path)
        with path.open("rb") as fh:
            return pickle.load(fh)  # noqa: S301 - the user passed trust
    except Exception as exc:
        raise InputError(f"{path}: could not unpickle it ({_first_line(exc)})",
                         "check that the file is complete and the libraries it needs are installed"
                         ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
