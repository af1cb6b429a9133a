"""A workbook of a model's size (16 M weights, a 12,000 × 768 embedding table) built and
checked in bounded memory: the blocks written and read as streams, the calculation keeping
the weights as arrays (`direct_calc.ArrayRows`) instead of a grid of every cell."""

import pytest
from helpers.cli import peak_memory

BOUND_MB = 2000  # each process; a grid of every cell, or the engine's graph, takes > 3 GB


@pytest.mark.slow
def test_a_model_sized_gpt_builds_and_checks_in_bounded_memory(tmp_path):
    path = tmp_path / "g.xlsx"
    done, build_mb = peak_memory("build", "gpt", "-o", path, "--seq-len", 4, "--d-model", 768,
                                 "--heads", 12, "--layers", 1, "--vocab", 12_000,
                                 "--layout", "blocks")
    assert done.returncode == 0, done.stderr
    done, check_mb = peak_memory("check", path)
    print(f"build {build_mb:.0f} MB, check {check_mb:.0f} MB")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "steps pass" in done.stdout
    assert build_mb < BOUND_MB and check_mb < BOUND_MB
