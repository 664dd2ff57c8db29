"""Fixtures every quantization test module shares: the CNN trained on scikit-learn's digits
(once per module) and its calibration file (320 training images, a dataset of rows); the tiny
digits detector (once per session)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def trained():
    pytest.importorskip("torch", reason="needs torch")
    pytest.importorskip("sklearn", reason="needs scikit-learn (its digits dataset)")
    from quant_models import digits_cnn

    t = digits_cnn()
    assert t.float_accuracy > 0.85  # a model that learnt something: accuracy can be lost
    return t


@pytest.fixture(scope="module")
def calibration(tmp_path_factory, trained) -> Path:
    path = tmp_path_factory.mktemp("calib") / "calib.npz"
    np.savez(path, input=trained.train[:320])  # a dataset of rows: cut into sets of the samples' batch
    return path


@pytest.fixture(scope="session")
def detector():
    """The tiny digits detector (quant_models.digits_detector) and its float recall."""
    torch = pytest.importorskip("torch", reason="needs torch")
    pytest.importorskip("sklearn", reason="needs scikit-learn (its digits dataset)")
    from quant_models import detector_recall, digits_detector

    d = digits_detector()
    with torch.no_grad():
        recall = detector_recall(lambda c: [v.numpy() for v in d.model(torch.tensor(c))], d)
    assert recall > 0.7, recall  # it learnt to find digits: there is something to lose
    return d, recall
