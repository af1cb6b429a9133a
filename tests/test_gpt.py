"""gpt: a tiny random GPT-2 saved by transformers with save_pretrained, built whole as a sheet
from that folder; its LOGITS equal GPT2LMHeadModel's logits in float64 under the `formulas`
engine and LibreOffice, and editing a token id in the saved workbook moves the prediction
to the argmax of the model's logits for the new sequence."""

import numpy as np
import openpyxl
import pytest
from helpers.books import evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.models import (
    assert_close,
    engine_values,
    gpt2_forward,
    realistic_gpt2,
    save_tiny_gpt2,
)
from helpers.requires import requires_libreoffice, requires_transformers
from helpers.sheets import formulas_of

from workbook_builder import api
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.engines.libreoffice import evaluate_with_libreoffice
from workbook_builder.sheet.names import find_name
from workbook_builder.sheet.refs import range_ref

pytestmark = requires_transformers
IDS = [5, 17, 3, 42, 8, 0]


def softmax(row: np.ndarray) -> np.ndarray:
    e = np.exp(row - row.max())
    return e / e.sum()




@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_gpt_logits_equal_gpt2_lm_head_model(tiny_gpt2, tmp_path, layout):
    """LOGITS = GPT2LMHeadModel's logits, NEXT_PROBS its softmax at the last position,
    NEXT_TOKEN its argmax; in blocks also under LibreOffice, and check --engine all passes."""
    _, logits = gpt2_forward(tiny_gpt2, IDS)
    path = tmp_path / f"gpt_{layout}.xlsx"
    book = api.build("gpt", path, checkpoint=tiny_gpt2, token_ids=IDS, layout=layout)
    assert (book.params.layers, book.params.vocab, book.params.seq_len) == (2, 50, 6)
    names = ["LOGITS", "NEXT_PROBS", "NEXT_TOKEN"]
    for engine, values in engine_values(path, book, libreoffice=layout == "blocks"):
        got = evaluated_blocks(path, values, names)
        assert_close(got["LOGITS"], logits, f"{engine} {layout} LOGITS")
        assert_close(got["NEXT_PROBS"][0], softmax(logits[-1]), f"{engine} NEXT_PROBS")
        assert got["NEXT_TOKEN"][0, 0] == np.argmax(logits[-1])
    if layout == "blocks":
        ran = cli("check", path, "--engine", "all")
        assert ran.returncode == 0, ran.stdout + ran.stderr


@pytest.mark.parametrize("layout", ["cells", "blocks"])
def test_the_vocabulary_down_the_rows_equals_gpt2_lm_head_model(tiny_gpt2, tmp_path, layout):
    """--vocab-down-rows: LOGITS = WTE·FINALᵀ is GPT2LMHeadModel's logits transposed (one
    row per token id, one column per position), NEXT_PROBS one column, its softmax at the
    last position, and NEXT_TOKEN its argmax."""
    _, logits = gpt2_forward(tiny_gpt2, IDS)
    path = tmp_path / f"gpt_down_{layout}.xlsx"
    book = api.build("gpt", path, checkpoint=tiny_gpt2, token_ids=IDS, layout=layout,
                     vocab_down_rows=True)
    got = evaluated_blocks(path, book.values, ["LOGITS", "NEXT_PROBS", "NEXT_TOKEN"])
    assert got["LOGITS"].shape == (50, 6) and got["NEXT_PROBS"].shape == (50, 1)
    assert_close(got["LOGITS"], logits.T, f"{layout} LOGITS")
    assert_close(got["NEXT_PROBS"][:, 0], softmax(logits[-1]), f"{layout} NEXT_PROBS")
    assert got["NEXT_TOKEN"][0, 0] == np.argmax(logits[-1])
    assert api.check(book).passed


def test_a_checkpoint_wider_than_a_row_lays_its_vocabulary_down_the_rows(tmp_path):
    """A vocabulary of 16,384 ids, one more than a row of logits holds beside its labels,
    needs no flag: the checkpoint's sheet has LOGITS 16,384 × n, and its last id, beyond
    column XFD across, is a row like the others."""
    folder = save_tiny_gpt2(tmp_path / "wide", n_embd=4, n_layer=1, vocab=16_384,
                            n_positions=4)
    ids = [16_383, 7, 9_000]
    _, logits = gpt2_forward(folder, ids)
    path = tmp_path / "wide.xlsx"
    book = api.build("gpt", path, checkpoint=folder, token_ids=ids, layout="blocks")
    assert not book.params.vocab_down_rows and book.params.logits_down_rows
    # the parameter line says so beside vocab_down_rows=False, the flag not given
    subtitle = openpyxl.load_workbook(path, read_only=True)["GPT"]["A2"].value
    assert "vocab_down_rows=False (the vocabulary down the rows: wider than Excel's " \
        "columns)" in subtitle, subtitle
    got = evaluated_blocks(path, book.values, ["LOGITS", "NEXT_TOKEN"])
    assert got["LOGITS"].shape == (16_384, 3)
    assert_close(got["LOGITS"], logits.T, "LOGITS")
    assert got["NEXT_TOKEN"][0, 0] == np.argmax(logits[-1])


def test_gpt_at_a_realistic_size(tmp_path):
    """2 blocks of d = 64 with 4 heads, vocab 256, 16 tokens, blocks layout."""
    folder, ids, _, logits = realistic_gpt2(tmp_path)
    path = tmp_path / "real.xlsx"
    book = api.build("gpt", path, checkpoint=folder, token_ids=ids, layout="blocks")
    got = evaluated_blocks(path, book.values, ["LOGITS", "NEXT_TOKEN"])
    assert_close(got["LOGITS"], logits, "LOGITS")
    assert got["NEXT_TOKEN"][0, 0] == np.argmax(logits[-1])
    assert api.check(book).passed


def test_blocks_look_up_the_embedding_as_one_hot_times_the_table(tmp_path):
    """In `blocks`, TOK_EMB is one array formula, the one-hot rows of the ids times WTE (no
    INDEX per cell), and gives each id's row of WTE exactly, for ids edited afterwards too."""
    path = tmp_path / "gpt.xlsx"
    api.build("gpt", path, vocab=9, seq_len=4, layout="blocks")
    wb = openpyxl.load_workbook(path)
    emb, ids, wte = (find_name(wb, name, path) for name in ("TOK_EMB", "TOKEN_IDS", "WTE"))
    whole = {place: range_ref(place.top, place.left, place.bottom, place.right, True, True)
             for place in (emb, ids, wte)}
    labels = range_ref(wte.top, wte.left - 1, wte.bottom, wte.left - 1, True, True)
    assert [(text, array) for place, text, array in formulas_of(path)
            if place == f"{emb.sheet}!{whole[emb].replace('$', '')}" or "INDEX" in text] == [
        (f"=MMULT(IF({whole[ids]}=TRANSPOSE({labels}),1,0),{whole[wte]})", True)]
    table = np.array([[wb[wte.sheet].cell(wte.top + i, wte.left + j).value
                       for j in range(wte.shape[1])] for i in range(wte.shape[0])])
    edited = tmp_path / "edited.xlsx"
    edit_token(path, edited, 2, 8)
    for source in (path, edited):
        token_ids = [int(openpyxl.load_workbook(source)[ids.sheet].cell(ids.top + i,
                                                                         ids.left).value)
                     for i in range(4)]
        got = evaluated_blocks(source, evaluate_with_formulas(source), ["TOK_EMB"])
        assert np.array_equal(got["TOK_EMB"], table[token_ids])
    assert token_ids[2] == 8


def edit_token(path, target, row: int, token: int) -> None:
    """Type another id into TOKEN_IDS with openpyxl, as a user edits a yellow cell."""
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "TOKEN_IDS", path)
    wb[where.sheet].cell(where.top + row, where.left).value = token
    wb.save(target)


@requires_libreoffice
def test_editing_a_token_id_changes_the_prediction(tiny_gpt2, tmp_path):
    """A token id edited in the saved workbook: check passes from the new input and the
    NEXT_TOKEN shown, recalculated by the `formulas` engine and by LibreOffice, is the argmax
    of the model's logits for the new sequence, which differs from the old prediction."""
    path = tmp_path / "gpt.xlsx"
    api.build("gpt", path, checkpoint=tiny_gpt2, token_ids=IDS, layout="blocks")
    before = int(np.argmax(gpt2_forward(tiny_gpt2, IDS)[1][-1]))
    # the first id for the last position that changes the model's prediction
    token, after = next((t, a) for t in range(50)
                        for a in [int(np.argmax(gpt2_forward(tiny_gpt2, IDS[:-1] + [t])[1][-1]))]
                        if a != before)
    edited = tmp_path / "edited.xlsx"
    edit_token(path, edited, len(IDS) - 1, token)
    ran = cli("check", edited)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for values in (evaluate_with_formulas(edited), evaluate_with_libreoffice(edited)):
        assert evaluated_blocks(edited, values, ["NEXT_TOKEN"])["NEXT_TOKEN"][0, 0] == after


def test_a_token_id_outside_the_vocabulary_is_one_line(tmp_path):
    path = tmp_path / "gpt.xlsx"
    api.build("gpt", path, vocab=10)
    for typed, what in ((10, "holds 10"), (2.5, "holds 2.5"), (-1, "holds -1")):
        edited = tmp_path / "edited.xlsx"
        edit_token(path, edited, 0, typed)
        line = one_line_error(cli("check", edited))
        assert what in line and "a token id is a whole number 0 … 9" in line


def test_gpt_flags_are_checked(tiny_gpt2, tmp_path):
    out = tmp_path / "x.xlsx"
    ran = cli("build", "gpt", "--checkpoint", tiny_gpt2, "--layer", "1", "-o", out)
    assert "--layer is for decoder-block" in one_line_error(ran)
    ran = cli("build", "gpt", "--checkpoint", tiny_gpt2, "--layers", "3", "-o", out)
    assert "n_layer gives at most 2" in one_line_error(ran)
    ran = cli("build", "gpt", "--layers", "49", "-o", out)
    assert "--layers must be 1 … 48" in one_line_error(ran)
    ran = cli("build", "gpt", "--heads", "3", "-o", out)
    assert "--heads 3 does not divide --d-model 4" in one_line_error(ran)
    assert not out.exists()


def test_fewer_layers_than_the_checkpoint_stop_early(tiny_gpt2, tmp_path):
    """--layers 1 runs block 0 only, then the final LayerNorm: the logits of a 1-layer
    GPT2LMHeadModel holding the same weights."""
    import torch
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(tiny_gpt2, dtype=torch.float64).eval()
    model.transformer.h = model.transformer.h[:1]
    with torch.no_grad():
        logits = model(torch.tensor([IDS])).logits[0].numpy()
    path = tmp_path / "one.xlsx"
    book = api.build("gpt", path, checkpoint=tiny_gpt2, token_ids=IDS, layers=1,
                     layout="blocks")
    assert_close(evaluated_blocks(path, book.values, ["LOGITS"])["LOGITS"], logits, "LOGITS")
