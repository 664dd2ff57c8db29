"""scikit-learn's and skl2onnx's Python warnings go to unframe's debug log, not the user's stderr.

scikit-learn 1.9 deprecates ``SVC(probability=True)``: reading ``probA_``/``probB_`` (skl2onnx does,
for every route it tries) warns each time, and the warnings are about the user's estimator, not
anything they asked unframe to do. ``--debug`` (the ``unframe`` logger at DEBUG) shows them, each once.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)


@contextmanager
def warnings_to_debug_log(what: str) -> Iterator[None]:
    """Record every warning raised inside and log each distinct one at DEBUG, naming ``what``
    was being done. The caller's warning filters are restored on exit."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            seen = dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught)
            for message in seen:
                logger.debug("while %s: %s", what, message)
