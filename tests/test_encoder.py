"""encoder: a whole BERT-family encoder, token ids to the sentence embedding. Its reference
equals transformers' BertModel and sentence-transformers' pooling and Normalize in float64;
its sheet equals the reference (the registry tests) and follows an edited token id."""

import numpy as np
import openpyxl
import pytest
from helpers.books import evaluated_blocks
from helpers.cli import cli, one_line_error
from helpers.requires import requires_transformers

from reference.encoder import encoder_ref
from workbook_builder import api
from workbook_builder.engines.formulas_engine import evaluate_with_formulas
from workbook_builder.sheet.kind import make_params
from workbook_builder.sheet.names import find_name

IDS, IDS_2 = [2, 9, 4, 11, 3], [2, 7, 3]


def bert_inputs(model, ids, ids_2, layers: int) -> dict[str, np.ndarray]:
    """The kind's inputs from a BertModel's parameters, by hand: nn.Linear weights
    transposed into X·W, position rows 0 … n−1, token type 0's row."""
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    emb = "embeddings."
    inputs = {"TOKEN_IDS": np.array(ids, float)[:, None],
              "TOKEN_IDS_2": np.array(ids_2, float)[:, None],
              "WORD_EMB": state[emb + "word_embeddings.weight"],
              "POS_EMB": state[emb + "position_embeddings.weight"][:len(ids)],
              "POS_EMB_2": state[emb + "position_embeddings.weight"][:len(ids_2)],
              "TYPE_EMB": state[emb + "token_type_embeddings.weight"][:1],
              "EMB_GAMMA": state[emb + "LayerNorm.weight"][None],
              "EMB_BETA": state[emb + "LayerNorm.bias"][None]}
    parts = {"Q": "attention.self.query", "K": "attention.self.key",
             "V": "attention.self.value", "O": "attention.output.dense",
             "1": "intermediate.dense", "2": "output.dense"}
    norms = {"LN1": "attention.output.LayerNorm", "LN2": "output.LayerNorm"}
    for layer in range(layers):
        base, sfx = f"encoder.layer.{layer}.", f"_L{layer + 1}"
        for ours, theirs in parts.items():
            inputs[f"W_{ours}{sfx}"] = state[base + theirs + ".weight"].T
            inputs[f"B_{ours}{sfx}"] = state[base + theirs + ".bias"][None]
        for ours, theirs in norms.items():
            inputs[f"{ours}_GAMMA{sfx}"] = state[base + theirs + ".weight"][None]
            inputs[f"{ours}_BETA{sfx}"] = state[base + theirs + ".bias"][None]
    return inputs


@requires_transformers
@pytest.mark.parametrize("pooling", ["mean", "cls", "max"])
def test_reference_equals_bert_model_and_its_pooling(pooling):
    """Every OUTPUT_Ll = BertModel's hidden_states[l], EMBEDDED = hidden_states[0], POOLED
    its pooling (mean, CLS, max), EMBEDDING its normalised vector, SIMILARITY their cosine:
    float64, to 1e-12 relative."""
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=13, hidden_size=6, num_hidden_layers=3,
                        num_attention_heads=3, intermediate_size=10,
                        max_position_embeddings=8, hidden_act="gelu", layer_norm_eps=1e-12)
    torch.manual_seed(3)
    model = BertModel(config).double().eval()
    with torch.no_grad():
        for name, value in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                value.add_(0.3 * torch.randn_like(value))
    params = make_params(api.get_kind("encoder"),
                         {"seq_len": len(IDS), "d_model": 6, "heads": 3, "d_ff": 10,
                          "layers": 3, "vocab": 13, "pooling": pooling, "normalize": True,
                          "seq_len2": len(IDS_2)})
    got = encoder_ref(bert_inputs(model, IDS, IDS_2, 3), params)
    embeddings = []
    for ids, sfx in ((IDS, ""), (IDS_2, "_2")):
        with torch.no_grad():
            states = [h[0].numpy() for h in model(torch.tensor([ids]),
                                                  output_hidden_states=True).hidden_states]
        close(got["EMBEDDED" + sfx], states[0])
        for layer in range(1, 4):
            close(got[f"OUTPUT_L{layer}{sfx}"], states[layer])
        last = states[-1]
        pooled = {"mean": last.mean(0), "cls": last[0], "max": last.max(0)}[pooling]
        close(got["POOLED" + sfx][0], pooled)
        embeddings.append(pooled / np.linalg.norm(pooled))
        close(got["EMBEDDING" + sfx][0], embeddings[-1])
    close(got["SIMILARITY"][0, 0], embeddings[0] @ embeddings[1])


def close(got, exp, rtol: float = 1e-12) -> None:
    error = np.abs(np.asarray(got) - exp).max() / max(1.0, np.abs(exp).max())
    assert error < rtol, error


def test_an_edited_token_id_moves_the_embedding_and_check_follows(tmp_path):
    """A token id typed into the saved workbook: check recomputes the reference from it
    and passes, and EMBEDDING and SIMILARITY differ from the first build's."""
    path = tmp_path / "two.xlsx"
    book = api.build("encoder", path, seq_len=3, seq_len2=2, layers=2, vocab=9,
                     normalize=True, layout="blocks")
    names = ["EMBEDDING", "SIMILARITY"]
    before = evaluated_blocks(path, book.values, names)
    wb = openpyxl.load_workbook(path)
    ids = find_name(wb, "TOKEN_IDS", path)
    cell = wb[ids.sheet].cell(ids.top + 1, ids.left)
    cell.value = (int(cell.value) + 4) % 9
    edited = tmp_path / "edited.xlsx"
    wb.save(edited)
    report = api.check(edited)
    assert report.passed
    after = evaluated_blocks(edited, evaluate_with_formulas(edited), names)
    for name in names:
        assert not np.allclose(before[name], after[name]), name


@pytest.mark.parametrize("flags, says", [
    (["--pooling", "none", "--seq-len2", "2"], "--pooling none leaves the last hidden state"),
    (["--pooling", "none", "--normalize"], "--pooling none leaves the last hidden state"),
    (["--layers", "49"], "--layers must be 1 … 48"),
    (["--heads", "3"], "--heads 3 does not divide --d-model 4"),
])
def test_impossible_parameters_are_one_line(tmp_path, flags, says):
    assert says in one_line_error(cli("build", "encoder", *flags, "-o", tmp_path / "e.xlsx"))
