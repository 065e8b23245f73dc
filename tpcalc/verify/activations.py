"""Element-wise non-linearities of the FFN and their derivatives (numpy, float64 or int64).

ReLU keeps integer arrays integer, so seed 003's hand example stays exact. GELU is the exact
erf form (Hendrycks & Gimpel 2016, eq. 1: x·Φ(x)); SiLU is x·σ(x) (Elfwing et al. 2018).
"""

from __future__ import annotations

import math

import numpy as np

from tpcalc.verify.kinds import Activation

_erf = np.vectorize(math.erf, otypes=[float])
SQRT2 = math.sqrt(2.0)
SQRT_2PI = math.sqrt(2.0 * math.pi)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def activate(z: np.ndarray, act: Activation) -> np.ndarray:
    """f(z) element-wise."""
    if act is Activation.relu:
        return np.maximum(z, 0)
    if act is Activation.gelu:
        return z * 0.5 * (1.0 + _erf(z / SQRT2))
    return z * _sigmoid(z)


def activation_grad(z: np.ndarray, act: Activation) -> np.ndarray:
    """f'(z) element-wise (ReLU'(0) = 0, as PyTorch)."""
    if act is Activation.relu:
        return (z > 0).astype(z.dtype)
    if act is Activation.gelu:
        cdf = 0.5 * (1.0 + _erf(z / SQRT2))
        pdf = np.exp(-0.5 * z * z) / SQRT_2PI
        return cdf + z * pdf
    s = _sigmoid(z)
    return s * (1.0 + z * (1.0 - s))
