"""Reading a checkpoint from disk: its tensors by name, its config.json and tokenizer.json.

A checkpoint is a Hugging Face model folder (config.json + model.safetensors or
pytorch_model.bin), a zip of one, a bare .safetensors file, a torch state dict (.pt/.bin;
only torch's format before PyTorch 1.6 needs PyTorch), or a NumPy .npz. Nothing here
is imported at start-up beyond NumPy and the standard library: safetensors files are read by
the small reader below, from the format's specification (an 8-byte little-endian header
length, a JSON header of name -> dtype, shape, data_offsets, then the raw bytes).

Every file is bounded before it is read, and weights are read header first:
- a safetensors header is read alone (at most MAX_HEADER_BYTES), checked (dtypes, whole
  shapes, offsets inside the file, tensors tiling the data as the safetensors library
  requires), and each tensor's bytes are read from the file when the sheet asks for it;
- a torch state dict in torch's zip format has its directory and records bounded, its
  pickle read without torch (`torch_pickle.py`: shapes, dtypes and records, nothing run or
  allocated), and each tensor's bytes are then read from its record; the old non-zip
  format is read whole, by torch;
- a zip's weights member is read in place when stored; when deflated, its header is
  streamed alone and checked, then the member is unpacked within the packing bound;
- every JSON file (config.json, tokenizer.json, generation_config.json, modules.json …)
  goes through `_json_bytes`: bounded in size by its kind and in nesting depth by a scan
  of its bytes, before it is parsed.
`Checkpoint.tensor` is the one door a weight goes through: floating point only (F16, BF16,
F32, F64, given as float64), integers only for the integer buffers models keep
(position_ids, token_type_ids); anything else is one line naming the tensor, its dtype
and the file.
"""

import io
import itertools
import json
import math
import os
import re
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np

from workbook_builder.book.reading import (
    check_zip_directory,
    check_zip_handle,
    check_zip_parts,
    read_bounded,
    read_member,
    regular_file,
    stored_member_offset,
)
from workbook_builder.errors import UserError
from workbook_builder.models.config_values import checked_config
from workbook_builder.models.torch_pickle import ITEM_BYTES, TensorRecord, state_dict_tensors

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# safetensors dtype -> NumPy (little-endian); BF16 is widened by hand below
_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
           "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}
_ITEM_BYTES = {"BF16": 2, **{name: np.dtype(code).itemsize for name, code in _DTYPES.items()}}
# where weights go: the dtypes a model's library computes in (given to the sheet as float64)
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
INTEGER_DTYPES = ("I64", "I32", "I16", "I8", "U8")
# the integer buffers models keep beside their weights (BERT's position_ids and
# token_type_ids): the only tensors given as integers
INTEGER_BUFFERS = ("position_ids", "token_type_ids")
# tokenizer.json is handed whole to the tokenizers library: the largest vocabularies' take
# tens of MB
MAX_JSON_BYTES = 64 * 2**20
MAX_TOKENIZER_BYTES = MAX_JSON_BYTES
# config.json, generation_config.json, modules.json and the other settings files of a model
# folder take a few KB (a config with a label per class of ImageNet, under 100 KB)
MAX_CONFIG_BYTES = 4 * 2**20
# a safetensors header lists each tensor in about 100 bytes: 16 MB is 100,000s of tensors
# (the safetensors library itself stops at 100 MB)
MAX_HEADER_BYTES = 16 * 2**20
# a model's JSON nests a few levels (tokenizer.json's sequences of normalizers, under 10)
MAX_JSON_DEPTH = 100
# a torch zip's records other than tensor storages (data.pkl, version, byteorder): data.pkl
# names each tensor in about 100 bytes
MAX_TORCH_RECORD_BYTES = 16 * 2**20
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
    # each tensor's dtype as the file states it (safetensors' names: F32, BF16, I64, BOOL;
    # others by their library's name); a reader that leaves it out is judged by the array
    dtypes: dict[str, str] = field(default_factory=dict)
    # rows of a 2-D tensor read alone, where the format keeps them apart (safetensors,
    # torch's zip format); None: `rows` takes them from the whole tensor
    _read_rows: Callable[[str, list[int]], np.ndarray] | None = None

    def dim(self, name: str, axis: int, dims: int = 2) -> int:
        """The size of axis `axis` of tensor `name`, which must have `dims` dimensions."""
        shape = tuple(self.shapes[name])
        if len(shape) != dims:
            shown = "×".join(map(str, shape)) if shape else "a scalar"
            raise UserError(f"{self.source}: tensor {name} has shape {shown}; a "
                            f"{dims}-dimensional tensor was expected")
        return shape[axis]

    def tensor(self, name: str) -> np.ndarray:
        """The tensor as float64, read from the file when first asked for; a tensor that is
        not floating point is refused naming it, its dtype and the file (the integer
        buffers of INTEGER_BUFFERS stay integers)."""
        if name not in self._cache:
            integers = name.rsplit(".", 1)[-1] in INTEGER_BUFFERS
            self._refuse_dtype(name, self.dtypes.get(name), integers)
            try:
                value = np.asarray(self._read(name))
                self._refuse_dtype(name, _numpy_dtype_name(value.dtype), integers)
                if value.shape != tuple(self.shapes[name]):
                    raise UserError(f"{self.source}: tensor {name} reads as shape "
                                    f"{list(value.shape)}, not the {list(self.shapes[name])} "
                                    f"its file states")
                self._cache[name] = value.astype(np.float64) if value.dtype.kind == "f" \
                    else value
            except MemoryError:
                shown = "×".join(map(str, self.shapes[name])) or "a scalar"
                needed = math.prod(self.shapes[name]) * 8
                raise UserError(f"{self.source}: tensor {name} ({shown}, {needed / 2**20:,.0f} "
                                f"MB as float64) does not fit in this process's memory; "
                                f"give a smaller model or run with more memory") from None
        return self._cache[name]

    def rows(self, name: str, indices: list[int]) -> np.ndarray:
        """Rows `indices` of the 2-D weight `name` (an embedding table's looked-up rows) as
        float64, checked as `tensor` checks; only those rows are read where the format
        allows it, so a table of gigabytes costs its rows alone."""
        shape = tuple(self.shapes[name])
        if len(shape) != 2 or not all(0 <= i < shape[0] for i in indices):
            raise UserError(f"{self.source}: tensor {name} of shape {list(shape)} has no rows "
                            f"{list(indices)}")
        if name in self._cache or self._read_rows is None:
            return self.tensor(name)[list(indices)]
        self._refuse_dtype(name, self.dtypes.get(name), False)
        value = np.asarray(self._read_rows(name, list(indices)))
        self._refuse_dtype(name, _numpy_dtype_name(value.dtype), False)
        return value.astype(np.float64)

    def _refuse_dtype(self, name: str, dtype: str | None, integers: bool) -> None:
        if dtype is None or dtype in FLOAT_DTYPES or (integers and dtype in INTEGER_DTYPES):
            return
        allowed = "whole numbers" if integers else "floating point (F16, BF16, F32 or F64)"
        raise UserError(f"{self.source}: tensor {name} holds {dtype} values; where the sheet "
                        f"reads it they must be {allowed}; save the model with its weights "
                        f"in floating point")


def _numpy_dtype_name(dtype: np.dtype) -> str:
    """A NumPy dtype by the safetensors name the readers use (F32, I64, BOOL, …)."""
    for name, code in _DTYPES.items():
        if dtype == np.dtype(code):
            return name
    return str(dtype)


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
    if suffix in (".safetensors", ".pt", ".pth", ".bin"):
        return _weights(_FileRange.whole(path), str(path))
    if suffix == ".npz":
        return _npz(path)
    raise UserError(f"{path}: not a checkpoint this tool reads (a model folder, .zip, "
                    f".safetensors, .pt/.bin or .npz)")


# -- JSON: bounded in size and depth before it is parsed ---------------------------------------

# a JSON string: quotes around anything but a quote or a backslash, or an escape
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_DEPTH_CHUNK = 4 * 2**20


def json_depth(data: bytes) -> int:
    """The deepest nesting of [ and { outside strings: a scan of the bytes (vectorised, a
    few ms per MB) that costs no Python object per value, made before json.loads."""
    codes = np.frombuffer(_JSON_STRING.sub(b"0", bytes(data)), np.uint8)
    deepest = depth = 0
    for start in range(0, len(codes), _DEPTH_CHUNK):
        chunk = codes[start:start + _DEPTH_CHUNK]
        steps = ((chunk == ord("[")) | (chunk == ord("{"))).astype(np.int32)
        steps -= (chunk == ord("]")) | (chunk == ord("}"))
        levels = np.cumsum(steps, dtype=np.int64)
        if len(levels):
            deepest = max(deepest, depth + int(levels.max()))
            depth += int(levels[-1])
    return deepest


def _json_bytes(data: bytes | bytearray, where: str) -> dict | list:
    """Any JSON value of a model's files, its nesting bounded by MAX_JSON_DEPTH before it
    is parsed (the size is bounded by the reader that gave `data`)."""
    if json_depth(data) > MAX_JSON_DEPTH:
        raise UserError(f"{where}: not readable JSON (nested too deeply): more than "
                        f"{MAX_JSON_DEPTH} levels of [ and {{, where a model's files nest a "
                        f"few")
    try:
        return json.loads(bytes(data))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{where}: not readable JSON ({exc})") from None
    except RecursionError:
        raise UserError(f"{where}: not readable JSON (nested too deeply)") from None


def _json(data: bytes | bytearray, where: str) -> dict:
    """A JSON object (config.json, a safetensors header)."""
    value = _json_bytes(data, where)
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a JSON object")
    return value


def _json_limit(relative: str) -> int:
    """The size bound of a model folder's JSON file by its kind."""
    return MAX_TOKENIZER_BYTES if PurePosixPath(relative).name == "tokenizer.json" else \
        MAX_CONFIG_BYTES


def _file_json(path: Path, relative: str) -> dict | list:
    """A model folder's JSON file, bounded by its kind (`_json_limit`) before it is read."""
    data = read_bounded(path, _json_limit(relative), relative,
                        "a model's settings files take a few KB")
    return _json_bytes(data, str(path))


def _member_json(archive: zipfile.ZipFile, member: str, where: str) -> dict | list:
    """A JSON member of a zipped model folder, bounded by its kind before it is unpacked."""
    return _json_bytes(read_member(archive, member, _json_limit(member), where), where)


def _config(value: dict | list, where: str) -> dict:
    if not isinstance(value, dict):
        raise UserError(f"{where}: expected a JSON object")
    return checked_config(value, where)


def _add_tokenizer(checkpoint: Checkpoint, data: bytes, where: str) -> None:
    """tokenizer.json as text for the tokenizers library; one that is not UTF-8 or nests
    beyond MAX_JSON_DEPTH is a problem --text meets (ids still build, labelled by id)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        checkpoint.tokenizer_problem = f"{where}: not UTF-8 text (byte {exc.start})"
        return
    if json_depth(data) > MAX_JSON_DEPTH:
        checkpoint.tokenizer_problem = (f"{where}: not readable JSON (nested too deeply): "
                                        f"more than {MAX_JSON_DEPTH} levels")
        return
    checkpoint.tokenizer_json = text


def tokenizer_text(path: Path) -> str:
    """A tokenizer.json given by hand: bounded, UTF-8 and nested within MAX_JSON_DEPTH."""
    data = read_bounded(path, MAX_TOKENIZER_BYTES, "tokenizer")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    if json_depth(data) > MAX_JSON_DEPTH:
        raise UserError(f"{path}: not readable JSON (nested too deeply): more than "
                        f"{MAX_JSON_DEPTH} levels of [ and {{")
    return text


# -- where weights' bytes come from: a range of a file, or a deflated zip member -------------

class _FileRange:
    """`size` bytes of a file from `offset` (a whole file, or a stored zip member), read a
    range at a time: nothing is read before it is asked for."""

    def __init__(self, path: Path, offset: int, size: int, where: str):
        self.path, self.offset, self.size, self.where = path, offset, size, where

    @classmethod
    def whole(cls, path: Path) -> "_FileRange":
        return cls(path, 0, regular_file(path, "checkpoint").st_size, str(path))

    def read(self, start: int, length: int) -> np.ndarray:
        if start < 0 or length < 0 or start + length > self.size:
            raise UserError(f"{self.where}: bytes {start:,} … {start + length:,} are beyond "
                            f"its {self.size:,} bytes")
        data = np.empty(length, np.uint8)  # not zero-filled: every byte is read into it
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset + start)
                got = handle.readinto(data)
        except OSError as exc:
            raise UserError(f"{self.where}: cannot read it ({exc.strerror or exc})") from None
        if got != length:
            raise UserError(f"{self.where}: truncated while read (it holds fewer bytes than "
                            f"when it was opened)")
        return data

    def head(self, start: int, length: int) -> np.ndarray:
        return self.read(start, length)

    def open(self) -> io.RawIOBase:
        return _RangeFile(self.path, self.offset, self.size)


class _RangeFile(io.RawIOBase):
    """A file-like view of a range of a file, for torch.load and zipfile (seekable)."""

    def __init__(self, path: Path, offset: int, size: int):
        self._handle = open(path, "rb")
        self._offset, self._size, self._at = offset, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, at: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._at, os.SEEK_END: self._size}[whence]
        self._at = max(0, base + at)
        return self._at

    def tell(self) -> int:
        return self._at

    def readinto(self, buffer) -> int:
        wanted = max(0, min(len(buffer), self._size - self._at))
        self._handle.seek(self._offset + self._at)
        got = self._handle.readinto(memoryview(buffer)[:wanted])
        self._at += got
        return got

    def close(self) -> None:
        self._handle.close()
        super().close()


class _MemoryFile(io.RawIOBase):
    """A file-like view of bytes in memory that copies nothing (io.BytesIO would)."""

    def __init__(self, view: memoryview):
        self._view, self._at = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, at: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._at, os.SEEK_END: len(self._view)}[whence]
        self._at = max(0, base + at)
        return self._at

    def tell(self) -> int:
        return self._at

    def readinto(self, buffer) -> int:
        chunk = self._view[self._at:self._at + len(buffer)]
        memoryview(buffer)[:len(chunk)] = chunk
        self._at += len(chunk)
        return len(chunk)


class _DeflatedMember:
    """A deflated zip member (MiniLM's model.zip): zip gives no random access into packed
    bytes, so its first bytes (the header) are streamed alone (`head`) and, once the header
    is checked, the member is unpacked whole, within the packing bound."""

    def __init__(self, path: Path, name: str, size: int, limit: int, where: str):
        self.path, self.name, self.size, self.limit, self.where = path, name, size, limit, where
        self._whole: bytearray | None = None

    def read(self, start: int, length: int) -> bytes | bytearray:
        if start + length > self.size:
            raise UserError(f"{self.where}: bytes {start:,} … {start + length:,} are beyond "
                            f"its {self.size:,} bytes")
        if self._whole is None:
            self._whole = self._unpacked()
        return memoryview(self._whole)[start:start + length]

    def head(self, start: int, length: int) -> bytes | bytearray:
        """Bytes of the header: unpacked up to them alone while the rest is not needed."""
        if self._whole is not None:
            return self.read(start, length)
        if start + length > self.size:
            raise UserError(f"{self.where}: bytes {start:,} … {start + length:,} are beyond "
                            f"its {self.size:,} bytes")
        try:
            with zipfile.ZipFile(self.path) as archive, archive.open(self.name) as member:
                member.seek(start)
                data = member.read(length)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise UserError(f"{self.where}: not readable ({exc})") from None
        if len(data) != length:
            raise UserError(f"{self.where}: the zip holds fewer bytes than it declares")
        return data

    def open(self) -> io.RawIOBase:
        if self._whole is None:
            self._whole = self._unpacked()
        return _MemoryFile(memoryview(self._whole))

    def _unpacked(self) -> bytearray:
        try:
            with zipfile.ZipFile(self.path) as archive:
                return read_member(archive, self.name, self.limit, self.where)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise UserError(f"{self.where}: not readable ({exc})") from None


def _weights(source, where: str) -> Checkpoint:
    return _safetensors(source, where) if where.endswith(".safetensors") else \
        _torch_state_dict(source, where)


def _from_folder(folder: Path) -> Checkpoint:
    found = [folder / name for name in WEIGHT_FILES if (folder / name).exists()]
    if not found:
        raise UserError(f"{folder}: a model folder holds {' or '.join(WEIGHT_FILES)}; "
                        f"this one has neither")
    for present in (*found[:1], folder / "config.json", folder / "tokenizer.json"):
        if present.exists():  # read where it lies: inside the folder, links included
            confined(folder, present.name, None, None, directory=False)
    checkpoint = _weights(_FileRange.whole(found[0]), str(found[0]))
    config, tokenizer = folder / "config.json", folder / "tokenizer.json"
    if config.exists():
        checkpoint.config = _config(_file_json(config, "config.json"), str(config))
    if tokenizer.exists():
        _add_tokenizer(checkpoint, read_bounded(tokenizer, MAX_TOKENIZER_BYTES,
                                                "tokenizer.json"), str(tokenizer))
    return checkpoint


def _zip_weights(archive: zipfile.ZipFile,
                 path: Path) -> tuple[dict[PurePosixPath, str], list[PurePosixPath]]:
    """A checkpoint zip's members by path (its parts bounded), and its weights files, the
    shallowest first: the first is the model folder's."""
    check_zip_parts(archive, path, "checkpoint")
    members = {PurePosixPath(n): n for n in archive.namelist()}
    weights = sorted((p for p in members if p.name in WEIGHT_FILES),
                     key=lambda p: (len(p.parts), WEIGHT_FILES.index(p.name)))
    return members, weights


def _from_zip(path: Path) -> Checkpoint:
    """A zip of a model folder, at its root or inside one folder (the shallowest wins).
    Every member read is bounded by the size the zip declares for it, before unpacking;
    the weights are read in place when stored, unpacked within the packing bound when
    deflated."""
    check_zip_directory(path, "checkpoint")
    try:
        with zipfile.ZipFile(path) as archive:
            members, weights = _zip_weights(archive, path)
            if not weights:
                raise UserError(f"{path}: the zip holds no {' or '.join(WEIGHT_FILES)}")
            folder = weights[0].parent
            where = f"{path}!{members[weights[0]]}"
            source = _weights_member(archive, path, members[weights[0]], where)
            config, tokenizer = folder / "config.json", folder / "tokenizer.json"
            config_value = tokenizer_data = None
            if config in members:
                config_where = f"{path}!{members[config]}"
                config_value = _config(_member_json(archive, members[config], config_where),
                                       config_where)
            if tokenizer in members:
                tokenizer_where = f"{path}!{members[tokenizer]}"
                tokenizer_data = bytes(read_member(archive, members[tokenizer],
                                                   MAX_TOKENIZER_BYTES, tokenizer_where))
    except (zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"{path}: not a readable zip ({exc})") from None
    checkpoint = _weights(source, where)
    if isinstance(source, _DeflatedMember):  # its header checked: unpacked now, once
        source.read(0, 0)
    checkpoint.config = config_value
    if tokenizer_data is not None:
        _add_tokenizer(checkpoint, tokenizer_data, tokenizer_where)
    checkpoint.source = str(path)
    return checkpoint


def _weights_member(archive: zipfile.ZipFile, path: Path, name: str, where: str):
    """The weights file inside a zip: read in place when stored; when deflated, refused
    before unpacking when it would unpack to more than MAX_PACKING_RATIO times its packed
    size (and more than the floor)."""
    info = archive.getinfo(name)
    if info.flag_bits & 0x1:
        raise UserError(f"{where}: encrypted; give the zip without a password")
    if info.compress_type == zipfile.ZIP_STORED:
        return _FileRange(path, stored_member_offset(path, info, where), info.file_size,
                          where)
    limit = max(PACKING_FLOOR_BYTES, MAX_PACKING_RATIO * info.compress_size)
    if info.file_size > limit:  # refused before anything is unpacked, as read_member would
        read_member(archive, name, limit, where)
    return _DeflatedMember(path, name, info.file_size, limit, where)


def _safetensors(source, where: str) -> Checkpoint:
    """The documented layout: u64 header length, JSON header, the tensors' bytes. The
    header is read alone and checked; each tensor's bytes are read when asked for."""
    if source.size < 8:
        raise UserError(f"{where}: not a safetensors file (shorter than its header length)")
    length = int.from_bytes(bytes(source.head(0, 8)), "little")
    if length > MAX_HEADER_BYTES and 8 + length <= source.size:
        raise UserError(f"{where}: its safetensors header is {length / 2**20:,.0f} MB, more "
                        f"than the {MAX_HEADER_BYTES // 2**20} MB attnsheets reads (a header "
                        f"lists each tensor in about 100 bytes)")
    if 8 + length > source.size:
        raise UserError(f"{where}: truncated or not a safetensors file (its header needs "
                        f"{length} bytes, the file has {source.size - 8})")
    header = _json(source.head(8, length), f"{where} (safetensors header)")
    body_size = source.size - 8 - length
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
        if not isinstance(dtype, str) or dtype not in _ITEM_BYTES:
            raise UserError(f"{where}: tensor {name!r} has dtype {dtype!r}, which this "
                            f"reader does not know")
        if not all(_whole(x) for x in (*shape, start, end)):
            raise UserError(f"{where}: tensor {name!r}: its shape and data_offsets must be "
                            f"whole numbers, 0 or more (the header gives {list(shape)} and "
                            f"{[start, end]})")
        if end > body_size:
            raise UserError(f"{where}: truncated: tensor {name!r} ends at byte {end} of the "
                            f"data, the file holds {body_size}")
        # the bytes the shape needs, in Python integers (a claim of 10^9×10^9 stays exact)
        needed = math.prod(shape) * _ITEM_BYTES[dtype]
        if end - start != needed:
            raise UserError(f"{where}: tensor {name!r} of shape {list(shape)} needs {needed:,} "
                            f"bytes, its data_offsets {[start, end]} hold "
                            f"{end - start:,}")
        entries[name], shapes[name] = (dtype, shape, start, end), shape
    _refuse_overlaps(entries, where)
    _refuse_uncovered(entries, body_size, where)

    def read(name: str) -> np.ndarray:
        dtype, shape, start, end = entries[name]
        return _decoded(source.read(8 + length + start, end - start), dtype).reshape(shape)

    def read_rows(name: str, indices: list[int]) -> np.ndarray:
        dtype, shape, start, _ = entries[name]
        row = shape[1] * _ITEM_BYTES[dtype]
        raw = [source.read(8 + length + start + i * row, row) for i in indices]
        return _decoded(np.concatenate(raw) if raw else b"", dtype).reshape(len(indices),
                                                                            shape[1])

    return Checkpoint(where, shapes, read, dtypes={name: entries[name][0] for name in entries},
                      _read_rows=read_rows)


def _decoded(raw, dtype: str) -> np.ndarray:
    """A safetensors dtype's bytes as a flat NumPy array (BF16 widened to float32)."""
    if dtype == "BF16":  # the top half of a float32
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, _DTYPES[dtype])


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


def _refuse_uncovered(entries: dict[str, tuple], body_size: int, where: str) -> None:
    """Bytes of the data no tensor covers: the safetensors library refuses such a file
    ("file not fully covered"), so transformers would not load it either."""
    covered = sum(end - start for _, _, start, end in entries.values())
    if covered != body_size:
        raise UserError(f"{where}: its data holds {body_size:,} bytes, its tensors cover "
                        f"{covered:,}; the safetensors library refuses a file not fully "
                        f"covered, and so does attnsheets")


# torch dtypes by the safetensors names the readers use; others go by torch's own name
# (complex64, float8_e4m3fn, qint8 …) and are refused where weights go
_TORCH_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
                 "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
                 "bool": "BOOL"}


def _torch_state_dict(source, where: str) -> Checkpoint:
    """A torch state dict. In torch's zip format (torch.save since PyTorch 1.6): its zip
    directory and every record but the tensors' bounded, its pickle read without torch
    (models/torch_pickle.py: names, shapes, dtypes and each storage's record, nothing run
    or allocated), each tensor's bytes read from its record when asked for. The older
    format needs torch, which reads it whole."""
    if source.size < 4 or bytes(source.head(0, 4)) != b"PK\x03\x04":
        try:
            import torch
        except ImportError:
            raise UserError(f"{where}: torch's format before PyTorch 1.6 needs PyTorch to "
                            f"read (pip install torch), or give the model as .safetensors "
                            f"or .npz") from None
        return _old_torch_state_dict(torch, source, where)
    records, pickled = _torch_records(source, where)
    tensors = state_dict_tensors(pickled, where)
    for name, record in tensors.items():
        if record.built_by is not None:
            raise UserError(f"{where}: tensor {name} {_torch_kind(record.built_by)}; the "
                            f"sheet reads dense tensors with their data")

    def span(name: str) -> tuple[TensorRecord, int, int, int]:
        """The tensor, its item size, and its first and last items in its storage."""
        record = tensors[name]
        item = ITEM_BYTES[record.storage.dtype]
        first = record.offset
        last = first + sum((n - 1) * step for n, step in zip(record.shape, record.strides,
                                                             strict=True))
        held = records.get(record.storage.key)
        if held is None:
            raise UserError(f"{where}: tensor {name} has no data in the file (no record "
                            f"data/{record.storage.key})")
        if math.prod(record.shape) and (last + 1) * item > min(held[1], record.storage.items
                                                               * item):
            raise UserError(f"{where}: tensor {name} reaches beyond its storage's "
                            f"{held[1]:,} bytes in the file")
        return record, item, first, last

    def read(name: str) -> np.ndarray:
        record, item, first, last = span(name)
        dtype = _np_dtype(record.storage.dtype)
        if math.prod(record.shape) == 0:
            return np.zeros(record.shape, dtype)
        raw = source.read(records[record.storage.key][0] + first * item,
                          (last + 1 - first) * item)
        flat = _from_raw(raw, record.storage.dtype)
        if _contiguous(record):
            return flat.reshape(record.shape)
        return np.lib.stride_tricks.as_strided(
            flat, record.shape, [step * flat.itemsize for step in record.strides],
            writeable=False).copy()

    def read_rows(name: str, indices: list[int]) -> np.ndarray:
        record, item, first, _ = span(name)
        if not _contiguous(record):
            return read(name)[indices]
        at, width = records[record.storage.key][0], record.shape[1]
        raw = [source.read(at + (first + i * width) * item, width * item) for i in indices]
        flat = _from_raw(np.concatenate(raw) if raw else np.zeros(0, np.uint8),
                         record.storage.dtype)
        return flat.reshape(len(indices), width)

    return Checkpoint(where, {k: v.shape for k, v in tensors.items()}, read,
                      dtypes={k: v.storage.dtype for k, v in tensors.items()},
                      _read_rows=read_rows)


def _torch_kind(built_by: str) -> str:
    """What a tensor torch rebuilds with `built_by` is, in words."""
    function = built_by.rsplit(".", 1)[-1]
    if "sparse" in function:
        return "is sparse (save it with .to_dense())"
    if "meta" in function:
        return "has no data in the file (a meta tensor)"
    if "qtensor" in function:
        return "is quantized (save it dequantized, in floating point)"
    return f"is not a plain tensor (torch rebuilds it with {function})"


def _contiguous(record: TensorRecord) -> bool:
    """Whether the tensor's items lie in row-major order, one after another."""
    expected, step = [], 1
    for n in reversed(record.shape):
        expected.append(step)
        step *= n
    return all(n == 1 or got == want for n, got, want in
               zip(record.shape, record.strides, reversed(expected), strict=True))


def _from_raw(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Raw little-endian bytes as the dtype's numbers (BF16: the top half of a float32)."""
    flat = np.frombuffer(raw, _np_dtype(dtype))
    if dtype == "BF16":
        return (flat.astype(np.uint32) << 16).view(np.float32)
    return flat


def _torch_dtype_name(dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    return _TORCH_DTYPES.get(name, name)


def _np_dtype(name: str) -> str:
    """The NumPy dtype a dtype's raw bytes are read as (BF16 as 16-bit words)."""
    return "<u2" if name == "BF16" else _DTYPES[name]


def _torch_records(source, where: str) -> tuple[dict[str, tuple[int, int]], bytes]:
    """Each tensor record's key -> (its offset in the file, its size), and the pickle that
    lists the tensors, after bounding torch's zip: its directory and parts, every other
    record (data.pkl, version …) within MAX_TORCH_RECORD_BYTES, tensor records stored
    (torch never packs them) and inside the file, written on a little-endian machine."""
    records, pickled = {}, None
    try:
        with source.open() as handle:
            check_zip_handle(handle, where, "torch state dict")
            with zipfile.ZipFile(handle) as archive:
                check_zip_parts(archive, where, "torch state dict")
                for info in archive.infolist():
                    parts = PurePosixPath(info.filename).parts
                    if len(parts) == 3 and parts[1] == "data":
                        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 1:
                            raise UserError(f"{where}: record {info.filename} is packed; "
                                            f"torch stores tensors as they are")
                        at = stored_member_offset(handle, info, where)
                        if at + info.file_size > source.size:
                            raise UserError(f"{where}: record {info.filename} ends beyond "
                                            f"the file")
                        records[parts[2]] = (at, info.file_size)
                    elif info.file_size > MAX_TORCH_RECORD_BYTES:
                        raise UserError(f"{where}: record {info.filename} is "
                                        f"{info.file_size / 2**20:,.0f} MB, more than the "
                                        f"{MAX_TORCH_RECORD_BYTES // 2**20} MB attnsheets "
                                        f"reads (it lists the tensors)")
                    elif parts[-1] == "byteorder" and len(parts) == 2:
                        order = archive.read(info).decode("ascii", "replace")
                        if order != "little":
                            raise UserError(f"{where}: saved on a {order}-endian machine; "
                                            f"save it again on this one")
                    elif parts[-1] == "data.pkl" and len(parts) == 2:
                        pickled = archive.read(info)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise UserError(f"{where}: not a readable torch state dict ({exc})") from None
    if pickled is None:
        raise UserError(f"{where}: not a torch state dict (its zip holds no data.pkl)")
    return records, pickled


def _torch_load(torch, handle, where: str, **options):
    """torch.load with weights_only, its warnings silenced (a refusal is one line) and
    any failure one line: the first sentence of torch's message."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(handle, weights_only=True, **options)
    except MemoryError:
        raise UserError(f"{where}: does not fit in this process's memory; give it as "
                        f".safetensors, read tensor by tensor") from None
    except UserError:
        raise
    except Exception as exc:  # torch raises many types on damaged or unsafe files
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        message = message.split(". ")[0].removesuffix(".") or type(exc).__name__
        raise UserError(f"{where}: not a readable torch state dict ({message})") from None


def _state_tensors(torch, state, where: str) -> dict:
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise UserError(f"{where}: holds a {type(state).__name__}, not a state dict")
    return {str(k): v for k, v in state.items() if isinstance(v, torch.Tensor)}


def _old_torch_state_dict(torch, source, where: str) -> Checkpoint:
    """torch's format before its zip (PyTorch < 1.6): torch reads it whole, in memory."""
    with source.open() as handle:
        state = _torch_load(torch, handle, where, map_location="cpu")
    tensors = _state_tensors(torch, state, where)

    def read(name: str) -> np.ndarray:
        value = tensors[name].detach()
        if value.layout != torch.strided or value.is_quantized or value.is_meta:
            raise UserError(f"{where}: tensor {name} is not a dense tensor with its data; the "
                            f"sheet reads dense tensors")
        if value.dtype == torch.bfloat16:
            return value.to(torch.float32).numpy()
        return value.numpy()

    return Checkpoint(where, {k: tuple(v.shape) for k, v in tensors.items()}, read,
                      dtypes={k: _torch_dtype_name(v.dtype) for k, v in tensors.items()})


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


def confined(folder: Path, relative: str, named_in: str | None, number: int | None,
              directory: bool) -> None:
    """Refuse a path of the folder's that leads out of it: `..`, a rooted path (POSIX or
    Windows spelling), a NUL, or on disk a link resolving outside. `named_in` is the file
    that names the path (modules.json) and `number` the module whose folder it is; a file
    of the folder is named by its own path."""
    said = (f"{named_in}: module {number}'s path {relative!r}" if number is not None
            else f"{named_in}: the path {relative!r}" if named_in else repr(relative))
    windows = PureWindowsPath(relative)
    if (windows.anchor or PurePosixPath(relative).is_absolute() or ".." in windows.parts
            or "\0" in relative):
        raise UserError(f"{said} leads out of the model folder; a module's files must lie "
                        f"inside it (a path relative to the folder, without '..')")
    if not folder.is_dir():
        return  # a zip: its members are names, never followed as links
    if number is None:
        said = str(folder / relative)
    try:
        root, target = folder.resolve(strict=True), (folder / relative).resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links
        raise UserError(f"{said}: cannot follow it ({exc}); a module's files must lie "
                        f"inside the model folder") from None
    roots = [root] if directory else [root, *_cache_blobs(folder)]
    if not any(target == r or target.is_relative_to(r) for r in roots):
        raise UserError(f"{said} is a link to {target}, outside the model folder; copy "
                        f"the files into {folder} instead of linking to them")


def _cache_blobs(folder: Path) -> list[Path]:
    """A Hugging Face cache snapshot (…/<repo>/snapshots/<revision>/) keeps its files as
    links into …/<repo>/blobs: that folder counts as inside."""
    folder = folder.absolute()
    if folder.parent.name != "snapshots":
        return []
    blobs = folder.parent.parent / "blobs"
    return [blobs.resolve()] if blobs.is_dir() else []


def model_json(path: Path, relative: str) -> tuple[dict | list | None, str]:
    """A JSON file of the model folder at `path` (a folder, or a zip of one: beside its
    weights) by its path inside the folder ("modules.json", "1_Pooling/config.json",
    "generation_config.json"), and where it was read; None when the folder has no such
    file. Bounded by its kind (`_json_limit`) and MAX_JSON_DEPTH before it is parsed."""
    path = Path(path)
    if path.is_dir():
        where = path / relative
        if not where.is_file():
            return None, str(where)
        confined(path, relative, None, None, directory=False)
        return _file_json(where, relative), str(where)
    if path.suffix.lower() != ".zip":
        return None, str(path)
    check_zip_directory(path, "checkpoint")
    try:
        with zipfile.ZipFile(path) as archive:
            members, weights = _zip_weights(archive, path)
            folder = weights[0].parent if weights else PurePosixPath("")
            member = folder / relative
            if member not in members:
                return None, f"{path}!{member}"
            where = f"{path}!{members[member]}"
            return _member_json(archive, members[member], where), where
    except (zipfile.BadZipFile, OSError) as exc:
        raise UserError(f"{path}: not a readable zip ({exc})") from None
