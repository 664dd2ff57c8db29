"""Loading scikit-learn models from files.

- ``.skops``: the default. skops lists the types the file declares that it does not trust by
  default; without ``trust`` those are refused by name. With ``trust`` exactly those are allowed.
- ``.pkl`` / ``.joblib``: unpickling runs code from the file, so only with ``trust``.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from unframe.errors import InputError, TrustRequiredError

PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib")


def load_file(path: Path, trust: bool) -> Any:
    if not path.is_file():
        raise InputError(f"{path}: no such file", "check the path")
    suffix = path.suffix.lower()
    if suffix == ".skops":
        return load_skops(path, trust)
    if suffix in PICKLE_SUFFIXES:
        return load_pickle(path, trust)
    raise InputError(f"{path}: not a scikit-learn model file (suffix {suffix or 'none'})",
                     "use a .skops, .pkl or .joblib file")


def load_skops(path: Path, trust: bool) -> Any:
    import skops.io as sio

    from unframe import archives

    archives.check_zip(path, "skops archive")  # entries escaping it, duplicates, zip bombs
    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as exc:
        raise InputError(f"{path}: not a readable skops file ({_first_line(exc)})",
                         "check that the file is complete and was written by skops.io.dump") from None
    if untrusted and not trust:
        raise TrustRequiredError(
            f"{path} declares types skops does not trust by default: {', '.join(untrusted)}; "
            "loading them may run their code",
            "inspect them, and pass --trust (trust=True) only if you trust the file",
            details={"untrusted_types": list(untrusted)})
    try:
        return sio.load(path, trusted=list(untrusted) or None)
    except Exception as exc:
        raise InputError(f"{path}: skops could not load it ({_first_line(exc)})",
                         "check that the file is complete and matches this scikit-learn") from None


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
