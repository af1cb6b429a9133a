"""Tests that need PyTorch, transformers, LibreOffice or Gnumeric skip with a one-line
reason where it is missing (and are put in their tier by tests/conftest.py)."""

import shutil
from importlib.util import find_spec

import pytest

requires_torch = pytest.mark.skipif(
    find_spec("torch") is None, reason="PyTorch is not installed (pip install torch==2.13.0)")


requires_transformers = pytest.mark.skipif(
    find_spec("transformers") is None,
    reason="transformers is not installed (pip install transformers)")


requires_libreoffice = pytest.mark.skipif(
    shutil.which("soffice") is None and shutil.which("libreoffice") is None,
    reason="LibreOffice is not installed (apt-get install libreoffice-calc-nogui)")


requires_gnumeric = pytest.mark.skipif(
    shutil.which("ssconvert") is None,
    reason="Gnumeric is not installed (apt-get install gnumeric)")


# -- tiers ------------------------------------------------------------------------------------
# A plain `pytest` runs the default tier; tests marked with a tier below run under `-m` (e.g.
# `pytest -m slow`) or `--all`. A test needing LibreOffice or Gnumeric is in `engines`, one
# needing PyTorch or transformers in `models`, without a mark of its own.
TIERS = ("engines", "models", "slow")
TIER_OF_REQUIREMENT = [(requires_libreoffice.mark, "engines"),
                       (requires_gnumeric.mark, "engines"),
                       (requires_torch.mark, "models"), (requires_transformers.mark, "models")]
