"""Shared fixtures and the tiers: the demo and the tutorial built once per test run (and
recalculated by LibreOffice and Gnumeric), the tiny checkpoints of every model family saved
once per run, and the tiers a plain `pytest` leaves out. Helpers live in tests/helpers/."""

import os
from pathlib import Path

import pytest
from helpers.cli import cli
from helpers.models import (
    LLAMA_SIZES,
    MAMBA_SIZES,
    save_llama,
    save_mamba,
    save_tiny_bert,
    save_tiny_gpt2,
)
from helpers.requires import (
    TIER_OF_REQUIREMENT,
    TIERS,
)
from helpers.runs import Demo, once_per_run
from hypothesis import settings

from workbook_builder.engines.gnumeric import recalculate_many
from workbook_builder.engines.libreoffice import convert_many
from workbook_builder.xlsx.versions import RELEASED_LIBRARIES_SWITCH

# property tests draw the same examples on every run and keep no example database: a
# failure reproduces anywhere (CI included), and nothing is written into the checkout
settings.register_profile("attnsheets", derandomize=True, database=None)
settings.load_profile("attnsheets")


# -- exercises -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> Demo:
    """`attnsheets demo` once for the whole run: every kind's demo workbooks, both layouts."""
    def make(folder: Path) -> None:
        ran = cli("demo", "--out", folder / "demo", "--quiet", "--no-model")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        (folder / "stdout.txt").write_text(ran.stdout, encoding="utf-8")

    folder = once_per_run(tmp_path_factory, "demo", make)
    return Demo(folder / "demo", (folder / "stdout.txt").read_text(encoding="utf-8"),
                sorted((folder / "demo").glob("*.xlsx")))


@pytest.fixture(scope="session")
def tutorial(tmp_path_factory) -> Demo:
    """`attnsheets reproduce wo-ai-ai` once for the whole run."""
    def make(folder: Path) -> None:
        ran = cli("reproduce", "wo-ai-ai", "--out", folder / "books")
        assert ran.returncode == 0, ran.stdout + ran.stderr
        (folder / "stdout.txt").write_text(ran.stdout, encoding="utf-8")

    folder = once_per_run(tmp_path_factory, "tutorial", make)
    return Demo(folder / "books", (folder / "stdout.txt").read_text(encoding="utf-8"),
                sorted((folder / "books").glob("wo-ai-ai_*.xlsx")))




def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", dest="all_tiers",
                     help="run every tier: also the tests marked engines, models or slow")
    _released_libraries_option(parser)


def _default_tier_only(config) -> bool:
    return not (config.option.markexpr or config.option.all_tiers)


def pytest_report_header(config):
    if _default_tier_only(config):
        return f"tiers: default ({', '.join(TIERS)} deselected; --all or -m runs them)"
    return None


@pytest.hookimpl(tryfirst=True)  # the tier marks are in place before `-m` selects
def pytest_collection_modifyitems(config, items):
    for item in items:
        for mark in list(item.iter_markers("skipif")):
            for requirement, tier in TIER_OF_REQUIREMENT:
                if mark == requirement and not item.get_closest_marker(tier):
                    item.add_marker(tier)
    if _default_tier_only(config):
        tiered = [item for item in items if any(item.get_closest_marker(t) for t in TIERS)]
        tiered_ids = set(map(id, tiered))
        if tiered:
            config.hook.pytest_deselected(items=tiered)
            items[:] = [item for item in items if id(item) not in tiered_ids]


@pytest.fixture(scope="session")
def recalculated_demo(demo, tmp_path_factory) -> list[tuple[Path, Path]]:
    """Every demo workbook, and its copy recalculated and saved by one LibreOffice run."""
    folder = once_per_run(tmp_path_factory, "recalculated",
                          lambda folder: convert_many(demo.books, "xlsx", folder))
    return [(book, folder / book.name) for book in demo.books]


@pytest.fixture(scope="session")
def gnumeric_demo(demo, tmp_path_factory) -> list[tuple[Path, Path]]:
    """Every demo workbook, and its copy recalculated and saved by Gnumeric (one ssconvert
    process per workbook, as many at once as there are cores)."""
    folder = once_per_run(tmp_path_factory, "gnumeric",
                          lambda folder: recalculate_many(demo.books, folder))
    return [(book, folder / book.name) for book in demo.books]


def _released_libraries_option(parser):
    parser.addoption("--released-libraries", action="store_true",
                     help="run with every library as released: each version guard of "
                          "workbook_builder/xlsx/versions.py answers 'unsupported' (sets "
                          f"{RELEASED_LIBRARIES_SWITCH}=1)")


def pytest_configure(config):
    if config.getoption("--released-libraries"):
        os.environ[RELEASED_LIBRARIES_SWITCH] = "1"  # read at each guard, workers inherit it


# -- tiny checkpoints, each saved once per run (made from a config, no download) ------------

@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return once_per_run(tmp_path_factory, "tiny-bert", save_tiny_bert)


@pytest.fixture(scope="session")
def tiny_gpt2(tmp_path_factory) -> Path:
    return once_per_run(tmp_path_factory, "tiny-gpt2", save_tiny_gpt2)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> Path:
    return once_per_run(tmp_path_factory, "tiny-llama",
                        lambda folder: save_llama(folder, LLAMA_SIZES))


@pytest.fixture(scope="session")
def tiny_mamba(tmp_path_factory) -> Path:
    return once_per_run(tmp_path_factory, "tiny-mamba",
                        lambda folder: save_mamba(folder, MAMBA_SIZES))
