"""Reading a checkpoint from disk: its tensors by name, its config.json and tokenizer.json.

A checkpoint is a Hugging Face model folder (config.json + model.safetensors or
pytorch_model.bin), a zip of one, a bare .safetensors file, a torch state dict (.pt/.bin,
read with weights_only=True; only this format needs PyTorch), or a NumPy .npz. Nothing here
is imported at start-up beyond NumPy and the standard library: safetensors files are read by
the small reader below, from the format's specification (an 8-byte little-endian header
length, a JSON header of name -> dtype, shape, data_offsets, then the raw bytes).
"""

import io
import itertools
import json
import math
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np

from workbook_builder.book.reading import (
    check_zip_directory,
    check_zip_parts,
    read_bounded,
    read_member,
    regular_file,
)
from workbook_builder.errors import UserError
from workbook_builder.models.config_values import checked_config

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# safetensors dtype -> NumPy (little-endian); BF16 is widened by hand below
_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
           "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}
# config.json and tokenizer.json are read whole and parsed: the largest vocabularies'
# tokenizer.json take tens of MB
MAX_JSON_BYTES = 64 * 2**20
# weights of trained or random models barely pack (a few %); a zip member unpacking to
# many times its packed size is not weights. Below the floor the ratio is not asked
MAX_PACKING_RATIO, PACKING_FLOOR_BYTES = 10, 64 * 2**20


@dataclass
class Checkpoint:
    """Tensors by name (each read when first asked for), with the config and tokenizer
    that came with them (None for a bare weights file)."""

    source: str
    shapes: dict[str, tuple[int, ...]]
    _read: Callable[[str], np.ndarray]
    config: dict | None = None
    tokenizer_json: str | None = None
    # why tokenizer.json beside the weights cannot be read (not UTF-8): --text says so,
    # --token-ids labels rows by their ids as without a tokenizer
    tokenizer_problem: str | None = None
    _cache: dict = field(default_factory=dict)

    def dim(self, name: str, axis: int, dims: int = 2) -> int:
        """The size of axis `axis` of tensor `name`, which must have `dims` dimensions."""
        shape = tuple(self.shapes[name])
        if len(shape) != dims:
            shown = "×".join(map(str, shape)) if shape else "a scalar"
            raise UserError(f"{self.source}: tensor {name} has shape {shown}; a "
                            f"{dims}-dimensional tensor was expected")
        return shape[axis]

    def tensor(self, name: str) -> np.ndarray:
        """The tensor as float64 (integer tensors stay integers)."""
        if name not in self._cache:
            value = np.asarray(self._read(name))
            self._cache[name] = value.astype(np.float64) if value.dtype.kind == "f" else value
        return self._cache[name]


def read_checkpoint(path: Path) -> Checkpoint:
    """Any of the formats above, or one line saying why not."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such checkpoint")
    if path.is_dir():
        return _from_folder(path)
    regular_file(path, "checkpoint")
    suffix = path.suffix.lower()
    if suffix == ".zip":
        return _from_zip(path)
    if suffix == ".safetensors":
        return _safetensors(_read_weights(path), str(path))
    if suffix in (".pt", ".pth", ".bin"):
        return _torch_state_dict(_read_weights(path), str(path))
    if suffix == ".npz":
        return _npz(path)
    raise UserError(f"{path}: not a checkpoint this tool reads (a model folder, .zip, "
                    f".safetensors, .pt/.bin or .npz)")


def _json(text: bytes | str, where: str) -> dict:
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{where}: not readable JSON ({exc})") from None
    except RecursionError:
        raise UserError(f"{where}: not readable JSON (nested too deeply)") from None
    if not isinstance(data, dict):
        raise UserError(f"{where}: expected a JSON object")
    return data


def _read_weights(path: Path) -> bytes:
    """A weights file's bytes (a pipe or a device is refused, not read forever)."""
    regular_file(path, "checkpoint")
    return path.read_bytes()


def _weights(data: bytes, where: str) -> Checkpoint:
    return _safetensors(data, where) if where.endswith(".safetensors") else \
        _torch_state_dict(data, where)


def _from_folder(folder: Path) -> Checkpoint:
    found = [folder / name for name in WEIGHT_FILES if (folder / name).exists()]
    if not found:
        raise UserError(f"{folder}: a model folder holds {' or '.join(WEIGHT_FILES)}; "
                        f"this one has neither")
    checkpoint = _weights(_read_weights(found[0]), str(found[0]))
    config, tokenizer = folder / "config.json", folder / "tokenizer.json"
    if config.exists():
        checkpoint.config = checked_config(
            _json(read_bounded(config, MAX_JSON_BYTES, "config.json"), str(config)),
            str(config))
    if tokenizer.exists():
        _add_tokenizer(checkpoint, read_bounded(tokenizer, MAX_JSON_BYTES, "tokenizer.json"),
                       str(tokenizer))
    return checkpoint


def _add_tokenizer(checkpoint: Checkpoint, data: bytes, where: str) -> None:
    try:
        checkpoint.tokenizer_json = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        checkpoint.tokenizer_problem = f"{where}: not UTF-8 text (byte {exc.start})"


def _from_zip(path: Path) -> Checkpoint:
    """A zip of a model folder, at its root or inside one folder (the shallowest wins).
    Every member read is bounded by the size the zip declares for it, before unpacking."""
    check_zip_directory(path, "checkpoint")
    try:
        with zipfile.ZipFile(path) as archive:
            check_zip_parts(archive, path, "checkpoint")
            members = {PurePosixPath(n): n for n in archive.namelist()}
            weights = sorted((p for p in members if p.name in WEIGHT_FILES),
                             key=lambda p: (len(p.parts), WEIGHT_FILES.index(p.name)))
            if not weights:
                raise UserError(f"{path}: the zip holds no {' or '.join(WEIGHT_FILES)}")
            folder = weights[0].parent
            where = f"{path}!{members[weights[0]]}"
            checkpoint = _weights(_weights_member(archive, members[weights[0]], where), where)
            config, tokenizer = folder / "config.json", folder / "tokenizer.json"
            if config in members:
                where = f"{path}!{members[config]}"
                checkpoint.config = checked_config(
                    _json(read_member(archive, members[config], MAX_JSON_BYTES, where),
                          where), where)
            if tokenizer in members:
                where = f"{path}!{members[tokenizer]}"
                _add_tokenizer(checkpoint, bytes(read_member(archive, members[tokenizer],
                                                             MAX_JSON_BYTES, where)), where)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"{path}: not a readable zip ({exc})") from None
    checkpoint.source = str(path)
    return checkpoint


def _weights_member(archive: zipfile.ZipFile, name: str, where: str) -> bytearray:
    """The weights file inside a zip, refused before unpacking when it would unpack to
    more than MAX_PACKING_RATIO times its packed size (and more than the floor)."""
    packed = archive.getinfo(name).compress_size
    return read_member(archive, name, max(PACKING_FLOOR_BYTES, MAX_PACKING_RATIO * packed),
                       where)


def _safetensors(data: bytes, where: str) -> Checkpoint:
    """The documented layout: u64 header length, JSON header, the tensors' bytes."""
    if len(data) < 8:
        raise UserError(f"{where}: not a safetensors file (shorter than its header length)")
    length = int.from_bytes(data[:8], "little")
    if 8 + length > len(data):
        raise UserError(f"{where}: truncated or not a safetensors file (its header needs "
                        f"{length} bytes, the file has {len(data) - 8})")
    header = _json(data[8:8 + length], f"{where} (safetensors header)")
    body = memoryview(data)[8 + length:]
    entries, shapes = {}, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (start, end) = info["dtype"], tuple(info["shape"]), \
                info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{where}: tensor {name!r} has no readable dtype/shape/offsets "
                            f"in the header") from None
        if not isinstance(dtype, str) or (dtype not in _DTYPES and dtype != "BF16"):
            raise UserError(f"{where}: tensor {name!r} has dtype {dtype!r}, which this "
                            f"reader does not know")
        if not all(_whole(x) for x in (*shape, start, end)):
            raise UserError(f"{where}: tensor {name!r}: its shape and data_offsets must be "
                            f"whole numbers, 0 or more (the header gives {list(shape)} and "
                            f"{[start, end]})")
        if end > len(body):
            raise UserError(f"{where}: truncated: tensor {name!r} ends at byte {end} of the "
                            f"data, the file holds {len(body)}")
        # the bytes the shape needs, in Python integers (a claim of 10^9×10^9 stays exact)
        needed = math.prod(shape) * (2 if dtype == "BF16" else np.dtype(_DTYPES[dtype]).itemsize)
        if end - start != needed:
            raise UserError(f"{where}: tensor {name!r} of shape {list(shape)} needs {needed:,} "
                            f"bytes, its data_offsets {[start, end]} hold "
                            f"{end - start:,}")
        entries[name], shapes[name] = (dtype, shape, start, end), shape
    _refuse_overlaps(entries, where)

    def read(name: str) -> np.ndarray:
        dtype, shape, start, end = entries[name]
        raw = body[start:end]
        if dtype == "BF16":  # the top half of a float32
            bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
            return bits.view(np.float32).reshape(shape)
        return np.frombuffer(raw, _DTYPES[dtype]).reshape(shape)

    return Checkpoint(where, shapes, read)


def _whole(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _refuse_overlaps(entries: dict[str, tuple], where: str) -> None:
    """Two tensors over the same bytes: the specification gives each its own range, and a
    file that shares them is not one a writer made (editing one would change the other)."""
    spans = sorted((start, end, name) for name, (_, _, start, end) in entries.items()
                   if end > start)
    for (_, end, first), (start, _, second) in itertools.pairwise(spans):
        if start < end:
            raise UserError(f"{where}: tensors {first!r} and {second!r} overlap in the data "
                            f"(their data_offsets share bytes)")


def _torch_state_dict(data: bytes, where: str) -> Checkpoint:
    try:
        import torch
    except ImportError:
        raise UserError(f"{where}: reading a torch state dict needs PyTorch (pip install "
                        f"torch), or give the model as .safetensors or .npz") from None
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types on damaged or unsafe files
        raise UserError(f"{where}: not a readable torch state dict "
                        f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
                        ) from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise UserError(f"{where}: holds a {type(state).__name__}, not a state dict")
    tensors = {str(k): v for k, v in state.items() if isinstance(v, torch.Tensor)}

    def read(name: str) -> np.ndarray:
        value = tensors[name].detach()
        return (value.to(torch.float64) if value.is_floating_point() else value).numpy()

    return Checkpoint(where, {k: tuple(v.shape) for k, v in tensors.items()}, read)


def _npz(path: Path) -> Checkpoint:
    """A NumPy .npz, a zip of .npy members: its directory and parts bounded as any zip's,
    each member's header read (a few hundred bytes) and its shape held to the bytes the
    member declares, and all of them to the packing bound of a zip's weights, before any
    tensor is unpacked; each tensor is unpacked when first asked for."""
    check_zip_directory(path, "checkpoint")
    try:
        with zipfile.ZipFile(path) as archive:
            check_zip_parts(archive, path, "checkpoint")
            members = [info for info in archive.infolist() if not info.is_dir()]
            _refuse_packed_tightly(members, path)
            headers = {_npz_key(info.filename): (info.filename,
                                                 _npy_header(archive, info, path))
                       for info in members}
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise UserError(f"{path}: not a readable .npz ({exc})") from None

    def read(name: str) -> np.ndarray:
        member, (dtype, shape, fortran, offset) = headers[name]
        where = f"{path}!{member}"
        try:
            with zipfile.ZipFile(path) as archive:
                data = read_member(archive, member, archive.getinfo(member).file_size, where)
        except (zipfile.BadZipFile, OSError, EOFError, KeyError) as exc:
            raise UserError(f"{where}: not readable ({exc})") from None
        flat = np.frombuffer(data, dtype, count=math.prod(shape), offset=offset)
        return flat.reshape(shape, order="F" if fortran else "C")

    return Checkpoint(str(path), {name: shape for name, (_, (_, shape, _, _))
                                  in headers.items()}, read)


# the longest .npy header read (NumPy's own reader stops at 10,000 bytes too)
MAX_NPY_HEADER_BYTES = 10_000


def _npz_key(member: str) -> str:
    """The array's name, as np.load gives it: the member's name without .npy."""
    return member.removesuffix(".npy")


def _refuse_packed_tightly(members: list[zipfile.ZipInfo], path: Path) -> None:
    """The .npz refused, before unpacking, when its members would unpack to more than
    MAX_PACKING_RATIO times their packed size (and more than the floor): a zip's weights
    file is held to the same bound."""
    unpacked = sum(info.file_size for info in members)
    packed = sum(info.compress_size for info in members)
    limit = max(PACKING_FLOOR_BYTES, MAX_PACKING_RATIO * packed)
    if unpacked > limit:
        raise UserError(f"{path}: its arrays unpack to {unpacked / 2**20:,.0f} MB from "
                        f"{packed / 2**20:,.1f} MB, more than the {limit / 2**20:,.0f} MB "
                        f"attnsheets reads from it (weights barely pack)")


def _npy_header(archive: zipfile.ZipFile, info: zipfile.ZipInfo,
                path: Path) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """(dtype, shape, Fortran order, where the data starts) of one .npy member, read from
    its header alone; a member that is no array of plain numbers, or whose shape needs
    other than the bytes it declares, is one line naming it."""
    where = f"{path}!{info.filename}"
    if not info.filename.endswith(".npy"):
        raise UserError(f"{where}: not a NumPy array (.npy); an .npz checkpoint holds "
                        f"arrays only")
    with archive.open(info) as member:
        try:
            version = np.lib.format.read_magic(member)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(
                    member, max_header_size=MAX_NPY_HEADER_BYTES)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(
                    member, max_header_size=MAX_NPY_HEADER_BYTES)
            else:
                raise ValueError(f"format version {version[0]}.{version[1]}")
        except (ValueError, TypeError, SyntaxError, EOFError) as exc:
            message = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise UserError(f"{where}: not a readable .npy header ({message})") from None
        offset = member.tell()
    if dtype.kind not in "fiub" or dtype.fields is not None or dtype.subdtype is not None:
        raise UserError(f"{where}: holds {dtype}, not an array of numbers")
    if not all(_whole(n) for n in shape):
        raise UserError(f"{where}: its shape {list(shape)} is not whole numbers, 0 or more")
    # the bytes the shape needs, in Python integers (a claim of 10^9×10^9 stays exact)
    needed, held = math.prod(shape) * dtype.itemsize, info.file_size - offset
    if needed != held:
        raise UserError(f"{where}: an array of shape {list(shape)} ({dtype}) needs "
                        f"{needed:,} bytes, the member holds {held:,}")
    return dtype, tuple(shape), fortran, offset


def model_json(path: Path, relative: str) -> tuple[dict | list | None, str]:
    """A JSON file of the model folder at `path` (a folder, or a zip of one: beside its
    weights) by its path inside the folder ("modules.json", "1_Pooling/config.json"), and
    where it was read; None when the folder has no such file."""
    path = Path(path)
    if path.is_dir():
        where = path / relative
        if not where.is_file():
            return None, str(where)
        return _json_value(read_bounded(where, MAX_JSON_BYTES, relative), str(where)), \
            str(where)
    if path.suffix.lower() != ".zip":
        return None, str(path)
    try:
        with zipfile.ZipFile(path) as archive:
            members = {PurePosixPath(n): n for n in archive.namelist()}
            weights = sorted((p for p in members if p.name in WEIGHT_FILES),
                             key=lambda p: (len(p.parts), WEIGHT_FILES.index(p.name)))
            folder = weights[0].parent if weights else PurePosixPath("")
            member = folder / relative
            if member not in members:
                return None, f"{path}!{member}"
            where = f"{path}!{members[member]}"
            return _json_value(read_member(archive, members[member], MAX_JSON_BYTES, where),
                               where), where
    except (zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"{path}: not a readable zip ({exc})") from None


def _json_value(text: bytes | bytearray, where: str) -> dict | list:
    """A JSON object or array (modules.json is an array)."""
    try:
        return json.loads(bytes(text))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{where}: not readable JSON ({exc})") from None
    except RecursionError:
        raise UserError(f"{where}: not readable JSON (nested too deeply)") from None
