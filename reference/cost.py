"""The cost tables' common blocks: the sheet's sizes and the lengths n every cost is
computed at (the sheet's own n, then 1k, 4k and 32k tokens). Each kind's reference computes
its own costs from its equations; counts are whole numbers, exact in float64 (< 2⁵³)."""

import numpy as np

LENGTHS = (1024, 4096, 32768)


def lengths(n: int) -> np.ndarray:
    """[n, 1024, 4096, 32768] as integers."""
    return np.array([n, *LENGTHS], dtype=np.int64)


def cost_blocks(sizes: list[int], n: np.ndarray, **columns: np.ndarray) -> dict[str, np.ndarray]:
    """COST_SIZES (1×k), COST_N and each named column (4×1), as float64."""
    for name, values in columns.items():
        assert np.all(np.abs(values) < 2**53), (name, values)  # exact as a float64
    return {"COST_SIZES": np.array([sizes], dtype=float),
            "COST_N": n.reshape(-1, 1).astype(float),
            **{name: np.asarray(values, dtype=float).reshape(-1, 1)
               for name, values in columns.items()}}
