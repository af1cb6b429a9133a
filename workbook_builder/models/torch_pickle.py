"""The tensors a torch state dict lists, from its pickle (`data.pkl` in torch's zip format,
what `torch.save` writes since PyTorch 1.6) without torch and without running it: a pickle
reader that knows the few names a state dict is made of — an OrderedDict, torch's
`_rebuild_tensor_v2` and `_rebuild_parameter`, the storage classes (`FloatStorage`, …) —
and records each tensor as its storage's key in the zip (`data/<key>`), its dtype, its
offset in the storage, its shape and its strides. Any other torch name (a sparse, quantized,
meta or subclassed tensor's rebuild function, a layout, a dtype) becomes an inert marker:
a tensor built by one is listed as such and refused when read; no other class or function
is ever found, so nothing in the file runs."""

import collections
import io
import pickle
from dataclasses import dataclass
from typing import Any

from workbook_builder.errors import UserError

# torch's storage classes, as they are pickled -> the dtype names the readers use
STORAGE_DTYPES = {"DoubleStorage": "F64", "FloatStorage": "F32", "HalfStorage": "F16",
                  "BFloat16Storage": "BF16", "LongStorage": "I64", "IntStorage": "I32",
                  "ShortStorage": "I16", "CharStorage": "I8", "ByteStorage": "U8",
                  "BoolStorage": "BOOL", "ComplexFloatStorage": "complex64",
                  "ComplexDoubleStorage": "complex128", "QInt8Storage": "qint8",
                  "QUInt8Storage": "quint8", "QInt32Storage": "qint32"}
ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
              "I8": 1, "U8": 1, "BOOL": 1, "complex64": 8, "complex128": 16, "qint8": 1,
              "quint8": 1, "qint32": 4}


@dataclass(frozen=True)
class Storage:
    """A storage the pickle refers to: its record's key, its dtype, its length in items."""

    key: str
    dtype: str
    items: int


@dataclass(frozen=True)
class TensorRecord:
    """A dense tensor over a storage (offset, shape and strides in items), or, with `built_by`,
    a tensor of another kind (sparse, quantized, meta, …), by the function that builds it."""

    storage: Storage | None
    offset: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    built_by: str | None = None


@dataclass(frozen=True)
class _Marker:
    """A torch name this reader does not build, as an inert value (called, it stays inert
    and remembers its name)."""

    name: str

    def __call__(self, *args, **kwargs) -> "_Marker":
        return self


def _rebuild_tensor(storage, offset, shape, strides, *rest) -> TensorRecord:
    """torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
    backward_hooks[, metadata])."""
    if not isinstance(storage, Storage) or not _whole(offset) or not _sizes(shape) or \
            not _sizes(strides) or len(shape) != len(strides):
        raise pickle.UnpicklingError("a tensor without a plain storage, offset, shape and "
                                     "strides")
    return TensorRecord(storage, offset, tuple(shape), tuple(strides))


def _rebuild_parameter(data, *rest):
    """torch._utils._rebuild_parameter(data, requires_grad, backward_hooks[, state]):
    a Parameter is its tensor."""
    return data


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _sizes(values) -> bool:
    return isinstance(values, tuple | list) and all(_whole(v) for v in values)


class _StateDictUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch._utils" and name in ("_rebuild_parameter",
                                                 "_rebuild_parameter_with_state"):
            return _rebuild_parameter
        if module == "torch" and name == "Size":
            return tuple
        if module == "torch" and name in STORAGE_DTYPES:
            return _Marker(name)
        if module == "torch" or module.startswith("torch."):
            return _Marker(f"{module}.{name}")
        raise pickle.UnpicklingError(f"it names {module}.{name}, which is not part of a "
                                     f"state dict")

    def persistent_load(self, saved_id) -> Storage:
        """('storage', storage class, key, location, items), as torch.save writes it."""
        if not (isinstance(saved_id, tuple) and len(saved_id) == 5 and
                saved_id[0] == "storage" and isinstance(saved_id[1], _Marker)
                and saved_id[1].name in STORAGE_DTYPES and _whole(saved_id[4])):
            raise pickle.UnpicklingError("a storage reference torch.save does not write")
        return Storage(str(saved_id[2]), STORAGE_DTYPES[saved_id[1].name], saved_id[4])


def state_dict_tensors(pickled: bytes, where: str) -> dict[str, TensorRecord]:
    """The tensors of the state dict pickled in `pickled` (a bare one, or one under
    "state_dict"), by name; anything that is not a state dict is one line."""
    try:
        state = _StateDictUnpickler(io.BytesIO(pickled)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError,
            KeyError, AttributeError, RecursionError, MemoryError) as exc:
        message = " ".join(str(exc).split())[:120] or type(exc).__name__
        raise UserError(f"{where}: not a readable torch state dict ({message})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict):
        raise UserError(f"{where}: holds a {type(state).__name__}, not a state dict")
    tensors = {}
    for key, value in state.items():
        if isinstance(value, TensorRecord):
            tensors[str(key)] = value
        elif isinstance(value, _Marker) and value.name.rsplit(".", 1)[-1].startswith(
                "_rebuild_"):
            tensors[str(key)] = TensorRecord(None, 0, (), (), value.name)
    return tensors
