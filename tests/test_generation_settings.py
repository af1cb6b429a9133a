"""transformer's generation settings follow transformers' own reading
(`workbook_builder/models/generation_settings.py`): with tiny random MarianMT and BART
models saved by save_pretrained, the sheet's GENERATED ids equal `generate`'s when it is
called with the folder's own settings (only max_new_tokens given) — generation_config.json
alone when the folder has one, config.json's generation keys otherwise, no config class
default added — and every setting greedy decoding does not compute is refused in one line
naming the key and the file that holds it. The table of keys is complete for the installed
transformers; a folder of another BART or Marian class is refused saying what it is."""

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import capped, cli, one_line_error, refused, requires_prlimit
from helpers.requires import requires_transformers
from helpers.translation import save_perturbed

from workbook_builder import api
from workbook_builder.models.generation_settings import KEYS, NEUTRAL, Rule

pytestmark = [requires_transformers, pytest.mark.models]

MARIAN = {"vocab_size": 13, "d_model": 6, "encoder_layers": 2, "decoder_layers": 2,
          "encoder_attention_heads": 3, "decoder_attention_heads": 3, "encoder_ffn_dim": 7,
          "decoder_ffn_dim": 7, "max_position_embeddings": 16, "pad_token_id": 12,
          "decoder_start_token_id": 12, "eos_token_id": 0, "forced_eos_token_id": 0,
          "scale_embedding": True, "activation_function": "swish", "init_std": 0.5}
BART = {"vocab_size": 17, "d_model": 10, "encoder_layers": 1, "decoder_layers": 2,
        "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 9,
        "decoder_ffn_dim": 9, "max_position_embeddings": 12, "init_std": 0.5}
# each family's ids: pad, the end, and an id greedy decoding does not choose first
IDS = {"marian": {"pad": 12, "end": 0, "other": 3},
       "bart": {"pad": 1, "end": 2, "other": 6}}
SOURCE, STEPS = [5, 3, 9, 1, 7], 5
DELETE = object()  # a key to remove from a file
GENERATION_CONFIG, CONFIG = "generation_config.json", "config.json"


def _model_class(family: str):
    from transformers import BartForConditionalGeneration, MarianMTModel

    return MarianMTModel if family == "marian" else BartForConditionalGeneration


def save_tiny(family: str, folder: Path, model_class=None) -> Path:
    """A seeded random model of `family` (linear weights N(0, 0.5), biases and norms
    perturbed), saved with save_pretrained as transformers writes it."""
    import torch
    from transformers import BartConfig, MarianConfig

    torch.manual_seed(0)
    config = MarianConfig(**MARIAN) if family == "marian" else BartConfig(**BART)
    model = (model_class or _model_class(family))(config).eval()
    if model_class is not None:  # another class: saved as it is
        model.save_pretrained(folder)
        return folder
    return save_perturbed(model, folder, None, "layer_norm" if family == "marian" else "norm")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("generation")
    return {family: save_tiny(family, root / family) for family in IDS}


def edit(path: Path, changes: dict) -> None:
    values = json.loads(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is DELETE:
            values.pop(key, None)
        else:
            values[key] = value
    path.write_text(json.dumps(values), encoding="utf-8")


def folder_with(saved: Path, folder: Path, config: dict | None = None,
                generation: dict | None = None, without_generation: bool = False) -> Path:
    """A copy of the saved folder with `config` and `generation` written into config.json
    and generation_config.json (DELETE removes a key), or without generation_config.json."""
    shutil.copytree(saved, folder)
    edit(folder / CONFIG, config or {})
    if without_generation:
        (folder / GENERATION_CONFIG).unlink()
    else:
        edit(folder / GENERATION_CONFIG, generation or {})
    return folder


def loaded(family: str, folder: Path):
    """The folder's model in float64 as from_pretrained loads it (Marian's sinusoid tables
    made exact, as the sheet's SIN and COS are)."""
    import torch

    model = _model_class(family).from_pretrained(folder, dtype=torch.float64).eval()
    if family == "marian":
        for table in (model.model.encoder.embed_positions, model.model.decoder.embed_positions):
            rows, d = table.weight.shape
            angle = np.arange(rows)[:, None] / np.power(10000.0, 2 * np.arange(d // 2)[None] / d)
            with torch.no_grad():
                table.weight.copy_(torch.tensor(np.concatenate([np.sin(angle), np.cos(angle)],
                                                               axis=1)))
    return model


def generated_by_generate(family: str, folder: Path, steps: int = STEPS) -> list[int]:
    """`generate` with the folder's own settings (only max_new_tokens given), without its
    first decoder id, padded after an early end with the pad id it uses."""
    import torch

    model = loaded(family, folder)
    with torch.no_grad():
        ids = model.generate(torch.tensor([SOURCE]), max_new_tokens=steps)[0].tolist()[1:]
    settings = model.generation_config
    end = settings.eos_token_id
    pad = settings.pad_token_id if settings.pad_token_id is not None else \
        (end[0] if isinstance(end, list) else end)
    return ids + [pad] * (steps - len(ids))


def generated_by_sheet(folder: Path, steps: int = STEPS) -> list[int]:
    book = api.build("transformer", checkpoint=folder, token_ids=SOURCE, decode=steps,
                     layout="blocks")
    return api.read_blocks(book)["GENERATED"].to_numpy(float)[:, 0].astype(int).tolist()


def refusal(folder: Path) -> str:
    return one_line_error(cli("build", "transformer", "-o", folder.parent / "t.xlsx",
                              "--checkpoint", folder, "--token-ids", "1,2,3",
                              "--layout", "blocks"))


# -- the table -----------------------------------------------------------------------------

def test_the_table_holds_every_key_the_installed_generation_config_knows():
    from transformers import GenerationConfig

    assert sorted(set(vars(GenerationConfig())) - set(KEYS)) == []
    assert all(isinstance(rule, Rule) and rule.why for rule in KEYS.values())
    assert all(None in rule.neutral for rule in KEYS.values() if rule.role == NEUTRAL)


def test_generates_own_defaults_written_out_build_what_generate_gives(saved, tmp_path):
    """generation_config.json holding every default generate gives an unset key
    (`_get_default_generation_params`, max_length 20, top_k 50 …) builds: none is refused."""
    from transformers import GenerationConfig

    defaults = GenerationConfig._get_default_generation_params()
    folder = folder_with(saved["marian"], tmp_path / "m", generation=defaults)
    assert generated_by_sheet(folder) == generated_by_generate("marian", folder)


# a value of each NEUTRAL key that changes what greedy generate gives (or is not greedy)
CHANGING = {
    "min_length": 3, "min_new_tokens": 2, "max_time": 5.0, "stop_strings": ["a"],
    "do_sample": True, "num_beams": 4, "use_mtp": True, "cache_implementation": "quantized",
    "temperature": 0.7, "top_k": 5, "top_p": 0.9, "min_p": 0.1, "top_h": 0.4,
    "typical_p": 0.5, "epsilon_cutoff": 3e-4, "eta_cutoff": 3e-4, "repetition_penalty": 1.3,
    "encoder_repetition_penalty": 1.2, "length_penalty": 2.0, "no_repeat_ngram_size": 3,
    "remove_invalid_values": True, "exponential_decay_length_penalty": [2, 1.5],
    "suppress_tokens": [3], "begin_suppress_tokens": [3], "sequence_bias": [[[3], 2.0]],
    "token_healing": True, "guidance_scale": 1.5,
    "watermarking_config": {"greenlist_ratio": 0.25, "bias": 2.0},
    "num_return_sequences": 2, "encoder_no_repeat_ngram_size": 2,
    "prompt_lookup_num_tokens": 10, "assistant_early_exit": 1, "low_memory": True,
    "penalty_alpha": 0.6, "dola_layers": "high", "diversity_penalty": 0.5,
    "num_beam_groups": 2, "constraints": [[3]], "force_words_ids": [[3]],
}
REFUSED = sorted(key for key, rule in KEYS.items() if rule.role == NEUTRAL)


def test_each_key_refused_has_a_value_here_to_try():
    assert sorted(CHANGING) == REFUSED


@pytest.mark.parametrize("file", [GENERATION_CONFIG, CONFIG])
@pytest.mark.parametrize("key", REFUSED)
def test_a_setting_greedy_decoding_does_not_compute_is_refused_naming_it_and_its_file(
        saved, tmp_path, key, file):
    """In generation_config.json, or in config.json of a folder without one: one line
    naming the file, the key and its value."""
    change = {key: CHANGING[key]}
    folder = folder_with(saved["marian"], tmp_path / "m",
                         **({"generation": change} if file == GENERATION_CONFIG else
                            {"config": change, "without_generation": True}))
    line = refusal(folder)
    assert f"{folder / file}: {key} is {json.dumps(CHANGING[key])}; " in line, line
    assert "leave it out" in line


@pytest.mark.parametrize("family", ["marian", "bart"])
def test_num_beams_is_refused_in_one_line_saying_what_to_do(saved, tmp_path, family):
    folder = folder_with(saved[family], tmp_path / "m", generation={"num_beams": 4})
    assert refusal(folder) == (
        f"attnsheets: error: {folder / GENERATION_CONFIG}: num_beams is 4; the transformer "
        f"sheet decodes greedily (num_beams 1, do_sample false): leave it out (or set it to "
        f"1) to build the greedy decoding")


@pytest.mark.parametrize("family", ["marian", "bart"])
def test_sampling_in_config_json_without_generation_config_is_refused(saved, tmp_path,
                                                                      family):
    folder = folder_with(saved[family], tmp_path / "m", config={"do_sample": True},
                         without_generation=True)
    assert refusal(folder) == (
        f"attnsheets: error: {folder / CONFIG}: do_sample is true; the transformer sheet "
        f"decodes greedily (num_beams 1, do_sample false): leave it out (or set it to false) "
        f"to build the greedy decoding")


def test_a_key_transformers_does_not_know_is_refused_naming_it_and_its_file(saved, tmp_path):
    folder = folder_with(saved["bart"], tmp_path / "m", generation={"beam_width": 4})
    assert refusal(folder) == (
        f"attnsheets: error: {folder / GENERATION_CONFIG}: beam_width is not a generation "
        f"setting transformers 5.24 knows; a newer transformers may act on it, which the "
        f"transformer sheet cannot tell: remove it to build")


def test_a_zipped_folder_names_the_member_that_holds_the_key(saved, tmp_path):
    folder = folder_with(saved["marian"], tmp_path / "tiny", generation={"top_p": 0.5})
    archive = tmp_path / "tiny.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for path in sorted(folder.iterdir()):
            out.write(path, f"tiny/{path.name}")
    line = one_line_error(cli("build", "transformer", "-o", tmp_path / "t.xlsx",
                              "--checkpoint", archive, "--token-ids", "1,2,3"))
    assert f"{archive}!tiny/generation_config.json: top_p is 0.5; the transformer sheet " \
           f"does not sample" in line, line


# -- which file generate reads: the sheet follows it ---------------------------------------

def _pad_made_likely(folder: Path, pad: int) -> None:
    """final_logits_bias of the pad id raised by 8: unbanned, greedy decoding chooses it."""
    from safetensors.numpy import load_file, save_file

    weights = load_file(str(folder / "model.safetensors"))
    weights["final_logits_bias"][0, pad] += 8
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})


# (id, config.json changes, generation_config.json changes (None: no such file), what
# generate's ids show, which proves which file it read)
def _cases(family: str) -> list:
    pad, end, other = IDS[family]["pad"], IDS[family]["end"], IDS[family]["other"]

    def first_is(expected):
        return lambda ids: ids[0] == expected

    def first_is_not(unexpected):
        return lambda ids: ids[0] != unexpected

    return [
        ("config.json's num_beams and forced_bos ignored beside generation_config.json",
         {"num_beams": 4, "forced_bos_token_id": other}, {}, first_is_not(other)),
        ("config.json's forced_eos ignored beside generation_config.json",
         {}, {"forced_eos_token_id": DELETE}, lambda ids: ids[-1] != end),
        ("config.json's bad_words_ids ignored beside generation_config.json",
         {"bad_words_ids": [[pad]]}, {}, lambda ids: pad in ids),
        ("generation_config.json's bad_words_ids applied",
         {}, {"bad_words_ids": [[pad]]}, lambda ids: pad not in ids),
        ("generation_config.json's forced_bos applied",
         {}, {"forced_bos_token_id": other}, first_is(other)),
        ("config.json's forced_bos applied without generation_config.json",
         {"forced_bos_token_id": other}, None, first_is(other)),
        ("no class default: without forced_eos in config.json no end is forced",
         {"forced_eos_token_id": DELETE}, None, lambda ids: ids[-1] != end),
        ("an end id given as a list of one", {}, {"eos_token_id": [end]},
         lambda ids: ids[-1] == end),
    ]


CASES = [pytest.param(family, *case[1:], id=f"{family}: {case[0]}")
         for family in IDS for case in _cases(family)]


@pytest.mark.parametrize("family,config,generation,shows", CASES)
def test_the_sheet_reads_the_settings_generate_reads(saved, tmp_path, family, config,
                                                     generation, shows):
    folder = folder_with(saved[family], tmp_path / "m", config=config,
                         generation=generation, without_generation=generation is None)
    if "bad_words_ids" in {**config, **(generation or {})}:
        _pad_made_likely(folder, IDS[family]["pad"])
    expected = generated_by_generate(family, folder)
    assert shows(expected), expected  # generate read the file the case says
    assert generated_by_sheet(folder) == expected


def test_bart_without_decoder_start_starts_from_bos_as_generate(saved, tmp_path):
    """No generation_config.json and no decoder_start_token_id in config.json: generate
    starts from bos_token_id (0), not BartConfig's default decoder start (2)."""
    folder = folder_with(saved["bart"], tmp_path / "m",
                         config={"decoder_start_token_id": DELETE}, without_generation=True)
    book = api.build("transformer", checkpoint=folder, token_ids=SOURCE, decode=STEPS,
                     layout="blocks")
    assert book.params.start_id == 0
    assert generated_by_sheet(folder) == generated_by_generate("bart", folder)


def test_the_old_force_bos_switch_in_config_json_forces_bos_as_generate(saved, tmp_path):
    folder = folder_with(saved["bart"], tmp_path / "m",
                         config={"force_bos_token_to_be_generated": True},
                         without_generation=True)
    expected = generated_by_generate("bart", folder)
    assert expected[0] == 0  # bos_token_id
    assert generated_by_sheet(folder) == expected


def test_marian_without_any_first_decoder_id_is_refused_as_generate_refuses(saved, tmp_path):
    folder = folder_with(saved["marian"], tmp_path / "m",
                         config={"decoder_start_token_id": DELETE}, without_generation=True)
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        generated_by_generate("marian", folder)
    assert refusal(folder) == (
        f"attnsheets: error: {folder / CONFIG}: decoder_start_token_id and bos_token_id are "
        f"unset; generate needs one as the first decoder id: set decoder_start_token_id "
        f"there")


def test_several_end_ids_are_refused_naming_generation_config(saved, tmp_path):
    folder = folder_with(saved["bart"], tmp_path / "m", generation={"eos_token_id": [2, 5]})
    assert refusal(folder) == (
        f"attnsheets: error: {folder / GENERATION_CONFIG}: eos_token_id is [2, 5]; the "
        f"transformer sheet takes one end id: give one id")


def test_no_end_id_is_refused_naming_generation_config(saved, tmp_path):
    folder = folder_with(saved["marian"], tmp_path / "m", generation={"eos_token_id": None})
    assert refusal(folder) == (
        f"attnsheets: error: {folder / GENERATION_CONFIG}: eos_token_id is unset, so "
        f"generate never ends a sequence early; the transformer sheet ends on an end id: set "
        f"eos_token_id there")


# -- another class of the model ------------------------------------------------------------

@pytest.mark.parametrize("family,class_name", [("bart", "BartModel"),
                                               ("bart", "BartForSequenceClassification"),
                                               ("marian", "MarianModel")])
def test_a_folder_of_another_class_says_what_it_is(tmp_path, family, class_name):
    import transformers

    folder = save_tiny(family, tmp_path / "m", getattr(transformers, class_name))
    wanted = "MarianMTModel" if family == "marian" else "BartForConditionalGeneration"
    line = refusal(folder)
    assert f"{folder}: not a {wanted} folder (config.json's architectures is " \
           f"[\"{class_name}\"]; its tensors lie under " in line, line
    assert f"transformer reads a {wanted} folder" in line
    edit(folder / CONFIG, {"architectures": DELETE})  # the tensors alone tell it
    line = refusal(folder)
    assert f"{folder}: not a {wanted} folder (config.json names no architectures and it " \
           f"has no " in line, line


# -- hostile generation_config.json: one line within 1 GB and 60 s -------------------------

@requires_prlimit
@pytest.mark.parametrize("hostile", ["huge", "deep"])
def test_a_hostile_generation_config_is_one_line(saved, tmp_path, hostile):
    folder = folder_with(saved["marian"], tmp_path / "m")
    path = folder / GENERATION_CONFIG
    if hostile == "huge":  # sparse: costs no disk
        with open(path, "r+b") as handle:
            handle.truncate(3 * 2**30)
    else:
        path.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    line = refused(capped("build", "transformer", "-o", tmp_path / "t.xlsx", "--checkpoint",
                          folder, "--token-ids", "1,2,3"))
    assert "generation_config.json" in line


def test_a_long_value_is_cut_short_in_its_one_line(saved, tmp_path):
    folder = folder_with(saved["marian"], tmp_path / "m",
                         generation={"suppress_tokens": list(range(100_000))})
    line = refusal(folder)
    assert f"{folder / GENERATION_CONFIG}: suppress_tokens is [0, 1, 2, " in line
    assert len(line) < 400, len(line)
