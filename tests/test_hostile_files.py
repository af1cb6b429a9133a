"""Checkpoint files bounded before they are read, each refusal one line and exit 2 from the
command line in a process of its own within 1 GB of address space and 60 s: weights files
of 1.5 GB (sparse on disk: they cost no space) read header first, a tensor the sheet reads
that does not fit refused, a 1.5 GB tensor the sheet does not read left unread (the build
succeeds), bytes no tensor covers refused as the safetensors library refuses them; tensors
whose dtype or layout is not a weight's (sparse, meta, complex, bool, int8) refused naming
the tensor, its dtype and the file; JSON files nested 300,000 deep or 60 MB of empty lists
refused before they are parsed."""

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import ADDRESS_SPACE, PRLIMIT, capped, refused, requires_prlimit
from helpers.numpy_models import BERT_CONFIG, HEADS, D, bert_weights, model_folder

from workbook_builder.errors import UserError
from workbook_builder.models import files
from workbook_builder.models.families import BERT

pytestmark = requires_prlimit

HUGE = 1_500_000_000  # bytes of a sparse tensor: beyond the 1 GB the command line has
DEEP = 300_000
ANCHOR = BERT.anchor  # the first layer's W_Q: every encoder-block sheet reads it
BIAS = BERT.layer["B_Q"][0].format(layer=0)
WORD_EMB = BERT.embeddings["WORD_EMB"][0]
POOLER = "pooler.dense.weight"  # BERT's pooler: beside the layer, never read by it
_NAMES = {np.dtype("<f4"): "F32", np.dtype("<f8"): "F64", np.dtype("i1"): "I8",
          np.dtype("?"): "BOOL", np.dtype("<i8"): "I64"}


def write_safetensors(path: Path, tensors: dict, trailing: int = 0) -> Path:
    """A safetensors file in the documented layout: each value an array (its bytes
    written) or (dtype, shape) of a tensor left as zeros on disk, sparse; `trailing` bytes
    of zeros after the last tensor, sparse too."""
    header, data, end = {}, b"", 0
    arrays = {name: value for name, value in tensors.items() if isinstance(value, np.ndarray)}
    for name, value in arrays.items():
        header[name] = {"dtype": _NAMES[value.dtype], "shape": list(value.shape),
                        "data_offsets": [end, end + value.nbytes]}
        data += value.tobytes()
        end += value.nbytes
    for name, (dtype, shape) in ((n, v) for n, v in tensors.items() if n not in arrays):
        size = int(np.prod(shape)) * files._ITEM_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [end, end + size]}
        end += size
    text = json.dumps(header).encode()
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text + data)
        handle.truncate(8 + len(text) + end + trailing)
    return path


def bert_folder(folder: Path, **changes) -> Path:
    """BERT's tiny weights as float32 safetensors with `changes` (name -> array, (dtype,
    shape) of a sparse tensor, or None to leave a tensor out), and BERT's config.json."""
    folder.mkdir()
    tensors = {name: np.asarray(value, "<f4") for name, value in bert_weights().items()}
    tensors.update(changes)
    write_safetensors(folder / "model.safetensors",
                      {name: value for name, value in tensors.items() if value is not None})
    (folder / "config.json").write_text(json.dumps(BERT_CONFIG))
    return folder


def build(tmp_path: Path, kind: str, checkpoint: Path, *args) -> subprocess.CompletedProcess:
    return capped("build", kind, "--checkpoint", checkpoint, *args, "-o",
                  tmp_path / "out.xlsx")


def refused_line(tmp_path: Path, kind: str, checkpoint: Path, *args) -> str:
    """The one line of a refused build, under the 1 GB and 60 s caps; no workbook left."""
    line = refused(build(tmp_path, kind, checkpoint, *args))
    assert not (tmp_path / "out.xlsx").exists()
    return line


def block_line(tmp_path: Path, checkpoint: Path, *args) -> str:
    return refused_line(tmp_path, "encoder-block", checkpoint, "--token-ids", "1,2", *args)


# -- 1.5 GB of weights: read header first, a tensor at a time -------------------------------

# a feed-forward layer 1.5 GB wide: the sheet reads its weights whole, in float64 twice that
WIDE = HUGE // 4 // D // 2
W_1, B_1, W_2 = (BERT.layer[ours][0].format(layer=0) for ours in ("W_1", "B_1", "W_2"))
WIDE_SHAPES = {W_1: (WIDE, D), B_1: (WIDE,), W_2: (D, WIDE)}


def test_a_1_5_gb_safetensors_tensor_the_sheet_reads_is_one_line(tmp_path):
    folder = bert_folder(tmp_path / "m", **{name: ("F32", shape)
                                           for name, shape in WIDE_SHAPES.items()})
    (folder / "config.json").write_text(json.dumps({**BERT_CONFIG, "intermediate_size": WIDE}))
    assert (folder / "model.safetensors").stat().st_size > HUGE
    line = block_line(tmp_path, folder, "--layout", "blocks")
    assert line.endswith(f"model.safetensors: tensor {W_1} (46875000×4, 1,431 MB as float64) "
                         f"does not fit in this process's memory; give a smaller model or run "
                         f"with more memory"), line


ROWS = """
import sys
from workbook_builder.models.files import read_checkpoint
print(read_checkpoint(sys.argv[1]).rows(sys.argv[2], [0, 3, 0]).tolist())
"""


def test_rows_of_a_1_5_gb_table_are_read_alone(tmp_path):
    table = ("F32", (HUGE // 4 // D, D))
    folder = bert_folder(tmp_path / "m", **{WORD_EMB: table})
    done = subprocess.run([PRLIMIT, f"--as={ADDRESS_SPACE}", sys.executable, "-c", ROWS,
                           folder, WORD_EMB], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout) == [[0.0] * D] * 3, done.stderr
    small = files.read_checkpoint(bert_folder(tmp_path / "small"))
    assert np.array_equal(small.rows(WORD_EMB, [3, 0, 3]), small.tensor(WORD_EMB)[[3, 0, 3]])


def test_a_1_5_gb_tensor_the_sheet_does_not_read_is_left_unread_and_it_builds(tmp_path):
    folder = bert_folder(tmp_path / "m", **{POOLER: ("F32", (HUGE // 4 // D, D))})
    assert (folder / "model.safetensors").stat().st_size > HUGE
    done = build(tmp_path, "encoder-block", folder, "--token-ids", "1,2")
    assert done.returncode == 0, done.stderr
    small = bert_folder(tmp_path / "small")
    assert capped("build", "encoder-block", "--checkpoint", small, "--token-ids", "1,2", "-o",
                  tmp_path / "small.xlsx").returncode == 0
    assert _input_values(tmp_path / "out.xlsx") == _input_values(tmp_path / "small.xlsx")


def _input_values(book: Path) -> list:
    """Every number of the workbook's input cells (the weights the sheet holds)."""
    from openpyxl import load_workbook

    sheet = load_workbook(book, read_only=True)
    return [cell for ws in sheet.worksheets for row in ws.iter_rows(values_only=True)
            for cell in row if isinstance(cell, float)]


def test_1_5_gb_no_tensor_covers_is_refused_as_the_safetensors_library_does(tmp_path):
    folder = bert_folder(tmp_path / "m")
    write_safetensors(folder / "model.safetensors",
                      {n: np.asarray(v, "<f4") for n, v in bert_weights().items()},
                      trailing=HUGE)
    line = block_line(tmp_path, folder)
    assert "its tensors cover" in line and "the safetensors library refuses a file not " \
                                          "fully covered" in line, line
    safetensors = pytest.importorskip("safetensors")
    with pytest.raises(Exception, match="not fully covered"):
        safetensors.safe_open(folder / "model.safetensors", "np")


def test_a_safetensors_header_claiming_1_5_gb_is_refused_unread(tmp_path):
    folder = bert_folder(tmp_path / "m")
    with open(folder / "model.safetensors", "wb") as handle:
        handle.write(struct.pack("<Q", HUGE) + b"{")
        handle.truncate(8 + HUGE)
    line = block_line(tmp_path, folder)
    assert "its safetensors header is 1,431 MB, more than the 16 MB attnsheets reads" \
        in line, line


# -- dtypes and shapes: floating point where weights go ---------------------------------------

@pytest.mark.parametrize("name,value,dtype", [
    (ANCHOR, np.ones((D, D), "i1"), "I8"),
    (BIAS, np.ones(D, "?"), "BOOL"),
    (ANCHOR, np.ones((D, D), "<i8"), "I64"),
], ids=["int8-weight", "bool-bias", "int64-weight"])
def test_a_safetensors_weight_that_is_not_floating_point_is_one_line(tmp_path, name, value,
                                                                     dtype):
    line = block_line(tmp_path, bert_folder(tmp_path / "m", **{name: value}))
    assert (f"tensor {name} holds {dtype} values; where the sheet reads it they must be "
            f"floating point (F16, BF16, F32 or F64)") in line, line
    assert "model.safetensors" in line, line


def test_integer_buffers_beside_the_weights_still_build(tmp_path):
    folder = bert_folder(tmp_path / "m", **{"embeddings.position_ids": np.arange(8)[None],
                                            "embeddings.token_type_ids": np.zeros((1, 8),
                                                                                  "<i8")})
    done = build(tmp_path, "encoder-block", folder, "--token-ids", "1,2")
    assert done.returncode == 0, done.stderr
    checkpoint = files.read_checkpoint(folder)
    assert checkpoint.tensor("embeddings.position_ids").tolist() == [list(range(8))]


@pytest.mark.parametrize("dtype,shape,says", [
    ("C64", [D, D], "has dtype 'C64', which this reader does not know"),
    ("F32", [-D, D], "its shape and data_offsets must be whole numbers, 0 or more (the "
                     "header gives [-4, 4]"),
    ("F32", [D, 2.5], "must be whole numbers, 0 or more"),
], ids=["complex", "negative-dimension", "fractional-dimension"])
def test_a_safetensors_dtype_or_shape_no_weight_has_is_one_line(tmp_path, dtype, shape, says):
    def change(header):
        header[ANCHOR]["dtype"], header[ANCHOR]["shape"] = dtype, shape

    folder = model_folder(tmp_path / "m", bert_weights(), BERT_CONFIG, change)
    assert says in block_line(tmp_path, folder)


# -- torch state dicts: bounded zip, unpickled onto the meta device, read record by record ---

def torch_folder(folder: Path, changes: dict, skip_data: bool = False) -> Path:
    """BERT's tiny weights saved with torch.save as pytorch_model.bin, with `changes`
    (name -> tensor); `skip_data`: storages left as zeros, sparse (torch's skip_data)."""
    import torch

    folder.mkdir()
    state = {name: torch.tensor(value, dtype=torch.float32)
             for name, value in bert_weights().items()}
    state.update(changes)
    if skip_data:
        with torch.serialization.skip_data():
            torch.save(state, folder / "pytorch_model.bin")
        _write_records(folder / "pytorch_model.bin", state, skip=set(changes))
    else:
        torch.save(state, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(BERT_CONFIG))
    return folder


def _write_records(path: Path, state: dict, skip: set[str]) -> None:
    """The bytes of every tensor but `skip`'s written where torch's skip_data left their
    records empty (their offsets read back from the meta device)."""
    import torch

    meta = torch.load(path, map_location="meta", weights_only=True)
    with open(path, "r+b") as handle:
        for name, value in state.items():
            if name not in skip:
                handle.seek(meta[name].untyped_storage()._checkpoint_offset)
                handle.write(value.contiguous().numpy().tobytes())


@pytest.mark.models
def test_a_1_5_gb_torch_tensor_the_sheet_does_not_read_is_left_unread_and_it_builds(
        tmp_path):
    import torch

    huge = torch.empty(HUGE // 4 // D, D)  # never touched: no memory is used
    folder = torch_folder(tmp_path / "m", {POOLER: huge}, skip_data=True)
    assert (folder / "pytorch_model.bin").stat().st_size > HUGE
    done = build(tmp_path, "encoder-block", folder, "--token-ids", "1,2")
    assert done.returncode == 0, done.stderr
    small = torch_folder(tmp_path / "small", {})
    assert capped("build", "encoder-block", "--checkpoint", small, "--token-ids", "1,2", "-o",
                  tmp_path / "small.xlsx").returncode == 0
    assert _input_values(tmp_path / "out.xlsx") == _input_values(tmp_path / "small.xlsx")


@pytest.mark.models
def test_a_1_5_gb_torch_tensor_the_sheet_reads_is_one_line(tmp_path):
    import torch

    wide = {name: torch.empty(shape) for name, shape in WIDE_SHAPES.items()}
    folder = torch_folder(tmp_path / "m", wide, skip_data=True)
    (folder / "config.json").write_text(json.dumps({**BERT_CONFIG, "intermediate_size": WIDE}))
    line = block_line(tmp_path, folder, "--layout", "blocks")
    assert line.endswith(f"pytorch_model.bin: tensor {W_1} (46875000×4, 1,431 MB as float64) "
                         f"does not fit in this process's memory; give a smaller model or run "
                         f"with more memory"), line


@pytest.mark.models
def test_rows_of_a_1_5_gb_torch_table_are_read_alone(tmp_path):
    import torch

    folder = torch_folder(tmp_path / "m", {WORD_EMB: torch.empty(HUGE // 4 // D, D)},
                          skip_data=True)
    done = subprocess.run([PRLIMIT, f"--as={ADDRESS_SPACE}", sys.executable, "-c", ROWS,
                           folder, WORD_EMB], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout) == [[0.0] * D] * 3, done.stderr


def _torch_changes(case: str) -> tuple[str, object]:
    import torch

    eye = torch.eye(D)
    return {"sparse": (ANCHOR, eye.to_sparse()),
            "meta": (ANCHOR, torch.empty(D, D, device="meta")),
            "complex": (ANCHOR, eye.to(torch.complex64)),
            "bool-bias": (BIAS, torch.ones(D, dtype=torch.bool)),
            "int8": (ANCHOR, eye.to(torch.int8)),
            "qint8": (ANCHOR, torch.quantize_per_tensor(eye, 0.1, 0, torch.qint8))}[case]


@pytest.mark.models
@pytest.mark.parametrize("case,says", [
    ("sparse", f"tensor {ANCHOR} is sparse (save it with .to_dense()); the sheet reads "
               f"dense tensors with their data"),
    ("meta", f"tensor {ANCHOR} has no data in the file (a meta tensor"),
    ("complex", f"tensor {ANCHOR} holds complex64 values; where the sheet reads it they "
                f"must be floating point"),
    ("bool-bias", f"tensor {BIAS} holds BOOL values; where the sheet reads it they must be "
                  f"floating point"),
    ("int8", f"tensor {ANCHOR} holds I8 values; where the sheet reads it they must be "
             f"floating point"),
    ("qint8", f"tensor {ANCHOR} is quantized (save it dequantized, in floating point)"),
])
def test_a_torch_tensor_that_is_not_a_dense_float_is_one_line(tmp_path, case, says):
    name, value = _torch_changes(case)
    folder = torch_folder(tmp_path / "m", {name: value})
    line = block_line(tmp_path, folder)
    assert says in line and "pytorch_model.bin" in line, line


@pytest.mark.models
def test_torch_views_and_dtypes_read_as_torch_holds_them(tmp_path):
    """Views (a transpose, a row at a storage offset, a column with a stride), BF16, F16
    and an integer buffer, in torch's zip format, in its format before 1.6, and zipped
    stored and deflated: each tensor equals torch's own."""
    import zipfile

    import torch

    base = torch.randn(3, 4, dtype=torch.float64)
    state = {"a": base, "t": base.t(), "row": base[1], "col": base[:, 2],
             "bf": torch.randn(5).to(torch.bfloat16), "h": torch.randn(2, 2).half(),
             "embeddings.position_ids": torch.arange(4), "empty": torch.zeros(0, 3)}
    torch.save(state, tmp_path / "new.pt")
    torch.save(state, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    for method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        with zipfile.ZipFile(tmp_path / f"{method}.zip", "w", method) as archive:
            archive.write(tmp_path / "new.pt", "m/pytorch_model.bin")
    for path in ("new.pt", "old.pt", f"{zipfile.ZIP_STORED}.zip",
                 f"{zipfile.ZIP_DEFLATED}.zip"):
        checkpoint = files.read_checkpoint(tmp_path / path)
        for name, value in state.items():
            expected = value.to(torch.float64) if value.is_floating_point() else value
            assert np.array_equal(checkpoint.tensor(name), expected.numpy()), (path, name)


# -- JSON: bounded in size and depth before it is parsed --------------------------------------

def deep(levels: int = DEEP) -> str:
    return "[" * levels + "]" * levels


def test_a_config_json_nested_300000_deep_is_one_line(tmp_path):
    folder = model_folder(tmp_path / "m", bert_weights(), '{"a": ' + deep() + "}")
    line = block_line(tmp_path, folder)
    assert line.endswith("config.json: not readable JSON (nested too deeply): more than 100 "
                         "levels of [ and {, where a model's files nest a few"), line


def test_a_config_json_of_60_mb_of_empty_lists_is_refused_unparsed(tmp_path):
    folder = model_folder(tmp_path / "m", bert_weights(), None)
    with open(folder / "config.json", "w") as handle:
        handle.write('{"a": [' + "[]," * (20 * 2**20) + "[]]}")
    line = block_line(tmp_path, folder)
    assert line.endswith("config.json is 60 MB, more than the 4.0 MB attnsheets reads in one "
                         "config.json (a model's settings files take a few KB)"), line


def test_a_zipped_config_json_nested_300000_deep_is_one_line(tmp_path):
    import zipfile

    folder = model_folder(tmp_path / "m", bert_weights(), '{"a": ' + deep() + "}")
    with zipfile.ZipFile(tmp_path / "m.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for path in folder.iterdir():
            archive.write(path, path.name)
    line = block_line(tmp_path, tmp_path / "m.zip")
    assert "m.zip!config.json: not readable JSON (nested too deeply)" in line, line


def test_a_tokenizer_json_nested_300000_deep_is_one_line_and_ids_still_build(tmp_path):
    folder = model_folder(tmp_path / "m", bert_weights(), BERT_CONFIG,
                          tokenizer=('{"a": ' + deep() + "}").encode())
    line = refused_line(tmp_path, "encoder-block", folder, "--text", "the")
    assert line.endswith("tokenizer.json: not readable JSON (nested too deeply): more than "
                         "100 levels; give --token-ids instead of --text"), line
    assert build(tmp_path, "encoder-block", folder, "--token-ids", "1,2").returncode == 0


def test_a_modules_json_nested_300000_deep_is_one_line(tmp_path):
    folder = model_folder(tmp_path / "m", bert_weights(), BERT_CONFIG)
    (folder / "modules.json").write_text(deep())
    line = refused_line(tmp_path, "encoder", folder, "--token-ids", "1,2", "--heads",
                        str(HEADS))
    assert "modules.json: not readable JSON (nested too deeply)" in line, line


@pytest.mark.models
def test_a_generation_config_json_nested_300000_deep_is_one_line(tmp_path):
    from transformers import MarianConfig, MarianMTModel

    folder = tmp_path / "marian"
    MarianMTModel(MarianConfig(
        vocab_size=13, d_model=6, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=3, decoder_attention_heads=3, encoder_ffn_dim=7,
        decoder_ffn_dim=7, max_position_embeddings=16, pad_token_id=12,
        decoder_start_token_id=12, eos_token_id=0, forced_eos_token_id=0)).save_pretrained(folder)
    (folder / "generation_config.json").write_text('{"a": ' + deep() + "}")
    line = refused_line(tmp_path, "transformer", folder, "--token-ids", "3,4,0")
    assert "generation_config.json: not readable JSON (nested too deeply)" in line, line


@pytest.mark.parametrize("text,depth", [
    ("{}", 1), ('{"a": [1, {"b": "[[[["}]}', 3), ('["\\"[", "\\\\", ["x"]]', 2),
    ("", 0), (deep(), DEEP), ('"[' + "{" * 500 + '"', 0)])
def test_json_depth_counts_brackets_outside_strings(text, depth):
    assert files.json_depth(text.encode()) == depth


def test_model_json_keeps_its_signature_and_bounds(tmp_path):
    folder = model_folder(tmp_path / "m", bert_weights(), BERT_CONFIG)
    (folder / "generation_config.json").write_text('{"max_length": 5}')
    assert files.model_json(folder, "generation_config.json") == (
        {"max_length": 5}, str(folder / "generation_config.json"))
    assert files.model_json(folder, "modules.json") == (None, str(folder / "modules.json"))
    (folder / "modules.json").write_text("[" + " " * files.MAX_CONFIG_BYTES + "]")
    with pytest.raises(UserError, match="more than the 4.0 MB attnsheets reads"):
        files.model_json(folder, "modules.json")
