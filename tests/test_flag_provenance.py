"""Every kind a checkpoint fills × every flag it declares × every family its reader reads,
all taken from the declarations (models/readers.py, each kind's Params): a flag either
builds the model the checkpoint defines — every step the build without it has, equal — or is
refused in one line; a flag that changes the model builds only when the reader declares it
the user's (`free`: the steps decoded, X's length without tokens, the first --layers layers),
and every value the checkpoint fixes is refused when it differs, naming the flag and where
the checkpoint says it, and builds at the checkpoint's own value."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import cli, one_line_error
from helpers.requires import requires_transformers

from workbook_builder import api
from workbook_builder.errors import UserError
from workbook_builder.models.readers import READERS
from workbook_builder.sheet.provenance import flag_of

pytestmark = [pytest.mark.models, requires_transformers]

TEXT_IDS = [2, 5, 7, 3]  # a few ids every tiny vocabulary here holds


def _save_plain_encoder(folder: Path, family: str) -> Path:
    from helpers.models import save_sentence_encoder

    return save_sentence_encoder(folder, family, "mean").parent / "transformer"


def _save_qwen2(folder: Path) -> Path:
    import torch
    from helpers.models import LLAMA_SIZES
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    model = Qwen2ForCausalLM(Qwen2Config(**LLAMA_SIZES, rms_norm_eps=1e-5,
                                         max_position_embeddings=64))
    with torch.no_grad():
        for name, value in model.named_parameters():
            value.normal_(0.0, 0.3) if "proj" in name else value.add_(
                0.3 * torch.randn_like(value))
    model.save_pretrained(folder)
    return folder


def _save_onnx(folder: Path) -> Path:
    """A tiny BertModel exported by torch.onnx at opset 17 (tests/test_encoder.py's)."""
    from helpers.models import export_onnx

    folder.mkdir(parents=True)
    return export_onnx(folder, "bert")[0]


def _save_tutorial(folder: Path) -> Path:
    from helpers.tutorial import save_state_dicts, tutorial_modules

    folder.mkdir(parents=True)
    encoder, decoder = tutorial_modules(8, 7, 3, seed=11)
    return save_state_dicts(folder / "model.pt", encoder, decoder)


def _save_marian(folder: Path) -> Path:
    from helpers.translation import save_tiny_marian

    return save_tiny_marian(folder)


def _save_bart(folder: Path) -> Path:
    from helpers.translation import save_tiny_bart

    return save_tiny_bart(folder)


def _from_helpers(name: str):
    def save(folder: Path, *args) -> Path:
        from helpers import models

        return getattr(models, name)(folder, *args)
    return save


# a tiny checkpoint of every family a reader declares: a family declared without one here
# fails the test that reads the declarations
MAKERS = {
    "BERT": _from_helpers("save_tiny_bert"),
    "RoBERTa": lambda folder: _save_plain_encoder(folder, "roberta"),
    "DistilBERT": lambda folder: _save_plain_encoder(folder, "distilbert"),
    "sentence-transformers": lambda folder: _from_helpers("save_sentence_encoder")(
        folder, "bert", "mean"),
    "ONNX": _save_onnx,
    "LLaMA": lambda folder: _from_helpers("save_llama")(folder, _llama_sizes()),
    "Qwen2": _save_qwen2,
    "GPT-2": _from_helpers("save_tiny_gpt2"),
    "Mamba": lambda folder: _from_helpers("save_mamba")(folder, _mamba_sizes()),
    "MarianMT": _save_marian,
    "BART": _save_bart,
    "the PyTorch translation tutorial": _save_tutorial,
}


def _llama_sizes():
    from helpers.models import LLAMA_SIZES

    return LLAMA_SIZES


def _mamba_sizes():
    from helpers.models import MAMBA_SIZES

    return MAMBA_SIZES


CASES = [(kind, family) for reader in READERS for kind in reader.kinds
         for family in reader.families]


def test_every_declared_family_has_a_checkpoint_here():
    assert sorted({f for _, f in CASES} - set(MAKERS)) == []


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}

    def get(family: str) -> Path:
        if family not in made:
            made[family] = MAKERS[family](tmp_path_factory.mktemp("ckpt") / "model")
        return made[family]
    return get


def _options(kind: str, family: str, checkpoint: Path) -> dict:
    """What a build of `kind` from this checkpoint needs besides flags: token ids where
    the kind starts from them (the encoder), a tokenizer for an ONNX graph."""
    if kind == "encoder":
        options = {"token_ids": TEXT_IDS}
        if family == "ONNX":
            options["tokenizer"] = _onnx_tokenizer(checkpoint)
        return options
    if kind == "seq2seq":
        return {"token_ids": [2, 5, 7]}
    if kind == "transformer":
        return {"token_ids": [3, 5, 7]}
    return {}


def _onnx_tokenizer(checkpoint: Path) -> Path:
    """A WordPiece tokenizer.json over the ids 0 … 16 beside the graph."""
    path = checkpoint.parent / "tokenizer.json"
    if not path.exists():
        from helpers.models import save_tiny_bert

        bert = save_tiny_bert(checkpoint.parent / "bert")
        path.write_bytes((bert / "tokenizer.json").read_bytes())
    return path


def _steps(kind: str, checkpoint: Path, options: dict, flags: dict):
    """The reference's steps of the build with these flags (as `build` resolves them),
    and what the checkpoint decided; a refusal raises."""
    model = api.checkpoint_inputs(kind, dict(flags), checkpoint, **options)
    return api.reference(kind, model.inputs, **{**model.params, **flags}), model


def _variants(field: dataclasses.Field, value):
    """Values of a parameter other than `value`, of its declared type."""
    choices = field.metadata.get("choices")
    if choices:
        return [c for c in choices if c != value]
    if isinstance(value, bool) or field.type is bool:
        return [not value]
    if isinstance(value, int) or value is None and "int" in str(field.type):
        start = value or 0
        return sorted({v for v in (start + 1, 1, 2 * start + 2) if v != value and v >= 1})
    if isinstance(value, float):
        return [value * 10 if value else 0.5, 0.125]
    return []


def _equal_where_shared(got: dict, base: dict) -> list[str]:
    """The steps both builds have with one shape whose values differ."""
    return [name for name, value in base.items() if name in got
            and np.shape(got[name]) == np.shape(value)
            and not np.allclose(np.asarray(got[name], float), np.asarray(value, float),
                                rtol=1e-12, atol=1e-300, equal_nan=True)]


@pytest.mark.parametrize("kind,family", CASES, ids=[f"{k}-{f.split()[-1]}" for k, f in CASES])
def test_every_flag_builds_the_checkpoints_model_or_is_refused(kind, family, checkpoints):
    checkpoint = checkpoints(family)
    options = _options(kind, family, checkpoint)
    base, model = _steps(kind, checkpoint, options, {})
    params = api.get_kind(kind).Params
    values = {**{f.name: f.default for f in dataclasses.fields(params)}, **model.params}
    silent = []
    for field in dataclasses.fields(params):
        for value in _variants(field, values[field.name]):
            try:
                got, _ = _steps(kind, checkpoint, options, {field.name: value})
            except UserError as refused:
                assert "\n" not in str(refused)
                continue
            changed = _equal_where_shared(got, base)
            held = model.decided.fixed.get(field.name)
            part = held is not None and held.at_most and value <= held.value
            if changed and field.name not in model.decided.free and not part:
                silent.append(f"{flag_of(field.name)} {value}: {', '.join(changed[:3])}")
    assert silent == [], f"{kind} from {family}: built another model: {silent}"


@pytest.mark.parametrize("kind,family", CASES, ids=[f"{k}-{f.split()[-1]}" for k, f in CASES])
def test_a_fixed_value_is_refused_naming_its_source_and_taken_at_its_own(kind, family,
                                                                          checkpoints):
    checkpoint = checkpoints(family)
    options = _options(kind, family, checkpoint)
    _, model = _steps(kind, checkpoint, options, {})
    fields = {f.name: f for f in dataclasses.fields(api.get_kind(kind).Params)}
    assert set(fields) <= set(model.decided.fixed) | model.decided.free
    for name, held in model.decided.fixed.items():
        if held.value is None:
            continue
        _steps(kind, checkpoint, options, {name: held.value})  # its own value builds
        for value in _variants(fields[name], held.value)[:1]:
            if held.at_most and isinstance(value, int) and value <= held.value:
                value = held.value + 1
            with pytest.raises(UserError) as refused:
                _steps(kind, checkpoint, options, {name: value})
            line = str(refused.value)
            if "contradicts the checkpoint" not in line:  # a value the kind never takes
                with pytest.raises(UserError):
                    api.reference(kind, {}, **{**model.params, name: value})
                continue
            assert line.startswith(f"{flag_of(name)} ") and held.said() in line, line


def test_the_command_line_refuses_a_flag_against_an_encoders_head(checkpoints, tmp_path):
    """The cases found building `encoder` from a checkpoint: the head's pooling and
    Normalize, and the config's heads, eps and activation, each one line naming the file."""
    folder = checkpoints("sentence-transformers")
    config = json.loads((folder / "config.json").read_text())
    cases = {("--heads", "1"): f"{folder}/config.json: num_attention_heads gives "
                               f"{config['num_attention_heads']}",
             ("--pooling", "cls"): f"{folder}'s Pooling module gives mean",
             ("--ln-eps", "1e-05"): f"{folder}/config.json: layer_norm_eps gives",
             ("--activation", "relu"): f"{folder}/config.json: hidden_act gives gelu",
             ("--gelu", "tanh"): f"{folder}/config.json: hidden_act gives exact"}
    for flags, says in cases.items():
        result = cli("build", "encoder", "--checkpoint", folder, "--token-ids", "2,5,7,3",
                     *flags, "-o", tmp_path / "e.xlsx", "--layout", "blocks")
        line = one_line_error(result)
        assert result.returncode == 2 and says in line and f"leave {flags[0]} out" in line, \
            line
        assert not (tmp_path / "e.xlsx").exists()


def test_the_sources_of_the_parameters_are_on_the_about_sheet_and_the_build_line(
        checkpoints, tmp_path):
    folder = checkpoints("BERT")
    out = tmp_path / "b.xlsx"
    result = cli("build", "encoder-block", "--checkpoint", folder, "--seq-len", "3",
                 "--layout", "blocks", "-o", out)
    assert result.returncode == 0, result.stderr
    line = next(s for s in result.stdout.splitlines() if s.startswith("parameters: "))
    assert "seq_len 3 by flag" in line
    assert f"heads 2 from {folder}/config.json: num_attention_heads" in line
    import openpyxl

    about = {row[0]: row[1] for row in openpyxl.load_workbook(out)["About"].iter_rows(
        min_row=4, max_col=2, values_only=True) if row[0]}
    assert about["parameters"] == line.removeprefix("parameters: ")


def test_a_value_the_kind_refuses_is_named_by_the_file_that_gave_it(tmp_path):
    """An odd d_model in a MarianMT config.json (its sinusoids work on pairs) is that
    file's key, not a --d-model nobody typed."""
    from helpers.translation import save_tiny_marian

    folder = save_tiny_marian(tmp_path / "odd", d_model=7, encoder_attention_heads=1,
                              decoder_attention_heads=1)
    result = cli("build", "transformer", "--checkpoint", folder, "--token-ids", "3,5,7",
                 "--layout", "blocks", "-o", tmp_path / "t.xlsx")
    line = one_line_error(result)
    assert result.returncode == 2 and \
        f"{folder}/config.json: d_model must be even (sin/cos work on pairs), got 7" in line \
        and "--d-model" not in line, line
