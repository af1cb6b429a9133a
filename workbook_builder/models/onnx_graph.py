"""An ONNX export of a BERT or DistilBERT encoder as a checkpoint: its initializers under
the module names the family tables read. Biases and LayerNorms keep their module names
(`…encoder.layer.0.attention.self.query.bias`); a MatMul weight may be anonymous
(`onnx::MatMul_470`, stored in×out), so each is named by following the graph: the MatMul
that reads it, and the Add that adds a named linear bias to its output. The config the
family tables read comes from the graph and holds every value it fixes: LayerNormalization's
epsilon (the ONNX default 1e-5 where a node leaves it out), the activation (Erf or Gelu:
GELU; Relu), the sizes from the weights' shapes, the heads from the reshape of the query,
key and value into (…, heads, d_k). What the graph tells is its config's (a --heads against
it is refused where every flag meets its checkpoint, sheet/provenance.py); heads the graph
cannot tell are required, and listed under NOT_IN_GRAPH in the config.

What is read is a table: the ai.onnx opsets in OPSETS (what `torch.onnx.export(…,
opset_version=17, dynamo=False)` writes, up to 20), the operators in OPERATORS with the
inputs they need and the attribute values the sheet's layer computes. Anything else is
refused naming it, and the refusal says how to export a graph that reads (EXPORT: torch
2.13's default exporter, dynamo, folds the position table into constants and shares equal
initializers between modules, so its graphs lose the names the weights are read by).

Before anything is allocated: the file is bounded (MAX_ONNX_BYTES), every initializer and
Constant tensor's declared shape and type are checked against the bytes it holds, tensors
kept in external files are refused, and so is a weight that is not floating point. Needs the
`onnx` package (an optional extra)."""

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbook_builder.book.reading import regular_file
from workbook_builder.errors import UserError
from workbook_builder.models.files import Checkpoint

ONNX_EXTRA = "pip install onnx onnxruntime"
EXPORT = 'torch.onnx.export(model, args, "model.onnx", opset_version=17, dynamo=False)'
HOW = f"export the BertModel or DistilBertModel with {EXPORT}"
# onnx.load holds the whole file, then its parsed message, then the arrays: a BERT-base
# export (110 M float32 weights) is 440 MB, and its whole sheet is already past what a
# spreadsheet program opens; BERT-large (1.34 GB) is refused. Protobuf itself stops at 2 GiB.
MAX_ONNX_BYTES = 2**30
MAX_RANK = 8  # no tensor of a BERT export has more dimensions (its scores have 4)
# the ai.onnx versions read: LayerNormalization is an operator from 17 on (before, exporters
# spell it out in ReduceMean, Pow, Sqrt…, with its epsilon a constant among others); the
# TorchScript exporter writes the same graph at 17 … 20 (Gelu for Erf at 20)
OPSETS = range(17, 21)
FAMILY_MARKS = {"bert": "encoder.layer.0.", "distilbert": "transformer.layer.0."}
LAYER_NUMBER = re.compile(r"(?:encoder|transformer)\.layer\.(\d+)\.")
# the biases of each family's nn.Linear modules: the MatMul whose product one is added to
# reads that module's weight
LINEAR_BIAS = {
    "bert": re.compile(r"(?:^|\.)encoder\.layer\.\d+\.(attention\.self\.(?:query|key|value)|"
                       r"attention\.output\.dense|intermediate\.dense|output\.dense)\.bias$"),
    "distilbert": re.compile(r"(?:^|\.)transformer\.layer\.\d+\.(attention\.(?:q_lin|k_lin|"
                             r"v_lin|out_lin)|ffn\.lin1|ffn\.lin2)\.bias$")}
PROJECTIONS = {"bert": ("attention.self.query", "attention.self.key", "attention.self.value"),
               "distilbert": ("attention.q_lin", "attention.k_lin", "attention.v_lin")}
INTERMEDIATE = {"bert": "intermediate.dense.weight", "distilbert": "ffn.lin1.weight"}
# integer buffers a BertModel may keep among its initializers (read by nothing in a layer)
INTEGER_BUFFERS = (".position_ids", ".token_type_ids")
# the config.json keys made from --flags because the graph does not fix them
NOT_IN_GRAPH = "not_in_graph"

# TensorProto data types read: number -> (name, bytes per value in raw_data, typed field)
FLOAT, INT32, BOOL, FLOAT16, DOUBLE, INT64, EXTERNAL = 1, 6, 9, 10, 11, 7, 1
DTYPES = {FLOAT: ("FLOAT", 4, "float_data"), DOUBLE: ("DOUBLE", 8, "double_data"),
          FLOAT16: ("FLOAT16", 2, "int32_data"), INT64: ("INT64", 8, "int64_data"),
          INT32: ("INT32", 4, "int32_data"), BOOL: ("BOOL", 1, "int32_data")}
WEIGHT_DTYPES = (FLOAT, DOUBLE, FLOAT16)
LN_EPSILON_DEFAULT = 1e-5  # the ONNX spec's, where a LayerNormalization node gives none

# attribute kinds: a value of that AttributeProto type, any value
INT, INTS, NUMBER, NUMBERS = "an integer", "integers", "a number", "numbers"
TENSOR, EPSILON = "a tensor", "a number ≥ 0"
MANY = 2**31


@dataclass(frozen=True)
class Operator:
    """What a node of the operator may have: inputs (fewest, most; the fewest all given)
    and attributes (name -> the values the sheet computes, or the kind the value is)."""

    inputs: tuple[int, int]
    attributes: dict
    since: int = 1  # the first ai.onnx version that has it


def _ops(names: str, inputs: tuple[int, int], attributes: dict | None = None):
    return {name: Operator(inputs, attributes or {}) for name in names.split()}


# what the TorchScript exporter writes of BertModel / DistilBertModel (opsets 17 … 20): the
# layer, the shapes and masks around it, and the mean pooling some sentence-encoder exports
# add at the end. The attributes that decide the layer's arithmetic are pinned to the value
# the sheet computes (LayerNormalization over the last axis in float32 stash, Softmax over
# the keys, Gelu exact or tanh); the others only shape and cast, and are checked for type.
OPERATORS = {
    **_ops("Add And Div Equal GreaterOrEqual MatMul Mul Sub", (2, 2)),
    **_ops("Erf Identity IsNaN Relu Sqrt", (1, 1)),
    **_ops("Expand Unsqueeze", (2, 2)), **_ops("Where Range", (3, 3)),
    **_ops("Slice", (3, 5)), **_ops("Clip", (1, 3)), **_ops("Squeeze", (1, 2)),
    "Cast": Operator((1, 1), {"to": (FLOAT, DOUBLE, FLOAT16, INT64, INT32, BOOL),
                              "saturate": (1,)}),
    "Concat": Operator((1, MANY), {"axis": INT}),
    "Constant": Operator((0, 0), {"value": TENSOR, "value_float": NUMBER,
                                  "value_floats": NUMBERS, "value_int": INT,
                                  "value_ints": INTS}),
    "ConstantOfShape": Operator((1, 1), {"value": TENSOR}),
    "Flatten": Operator((1, 1), {"axis": INT}),
    "Gather": Operator((2, 2), {"axis": INT}),
    "GatherElements": Operator((2, 2), {"axis": INT}),
    "Gelu": Operator((1, 1), {"approximate": ("none", "tanh")}, since=20),
    "LayerNormalization": Operator((3, 3), {"axis": (-1,), "epsilon": EPSILON,
                                            "stash_type": (1,)}, since=17),
    "ReduceSum": Operator((1, 2), {"keepdims": (0, 1), "noop_with_empty_axes": (0,)}),
    "Reshape": Operator((2, 2), {"allowzero": (0,)}),
    "Shape": Operator((1, 1), {"start": INT, "end": INT}),
    "Softmax": Operator((1, 1), {"axis": (-1,)}),
    "Transpose": Operator((1, 1), {"perm": INTS}),
}
# AttributeProto types of the kinds above
ATTRIBUTE_TYPES = {NUMBER: 1, INT: 2, TENSOR: 4, NUMBERS: 6, INTS: 7, EPSILON: 1}


def onnx_checkpoint(path: Path, heads: int | None = None) -> Checkpoint:
    """The export at `path` as a Checkpoint with a config.json made from its graph (`heads`:
    --heads, checked against the graph's own)."""
    size = regular_file(path, "checkpoint").st_size
    if size > MAX_ONNX_BYTES:
        raise UserError(f"{path}: {size:,} bytes, over the {MAX_ONNX_BYTES:,} an ONNX "
                        f"checkpoint may have (a BERT-base export is about 440 MB)")
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise UserError(f"{path}: reading an ONNX file needs the onnx package "
                        f"({ONNX_EXTRA})") from None
    try:  # external data stays unread: the initializers are checked first
        model = onnx.load(str(path), load_external_data=False)
    except MemoryError:
        raise UserError(f"{path}: its message does not fit in memory; not an ONNX file "
                        f"this reader can hold") from None
    except Exception as exc:  # protobuf raises its own DecodeError
        raise UserError(f"{path}: not a readable ONNX file ({type(exc).__name__})") from None
    graph = model.graph
    ops = _checked_nodes(model, path)
    for tensor, where in _tensors_of(graph):
        _check_tensor(tensor, where, path)
    tensors: dict[str, np.ndarray] = {}
    for init in graph.initializer:
        if init.name in tensors:
            raise UserError(f"{path}: two initializers are named {_shown(init.name)}")
        tensors[init.name] = numpy_helper.to_array(init)
    made = {o: node for node in graph.node for o in node.output}
    # an exporter may hand an initializer on through Identity nodes (shared values)
    for node in graph.node:
        if node.op_type == "Identity" and node.input[0] in tensors:
            tensors.setdefault(node.output[0], tensors[node.input[0]])
    named = {name: value for name, value in tensors.items() if not name.startswith("onnx::")
             and "." in name}
    model_type = next((kind for kind, mark in FAMILY_MARKS.items()
                       if any(mark in name for name in named)), None)
    if model_type is None:
        raise UserError(f"{path}: no BERT or DistilBERT layer names among its initializers; "
                        f"{HOW}")
    for name, value in named.items():
        if value.dtype.kind != "f" and not name.endswith(INTEGER_BUFFERS):
            raise UserError(f"{path}: initializer {_shown(name)} holds {value.dtype} values "
                            f"where a weight goes; a weight is float, float16 or double")
    weights, projections = _matmul_weights(graph, tensors, model_type, path)
    named.update(weights)
    config = _config(graph, ops, named, model_type, made, tensors, projections, heads, path)
    shapes = {name: tuple(value.shape) for name, value in named.items()}
    return Checkpoint(str(path), shapes, lambda name: np.asarray(named[name]), config)


def _shown(text: str, limit: int = 80) -> str:
    """A name from the file as one short line."""
    shown = text if text.isprintable() else repr(text)
    return shown if len(shown) <= limit else shown[:limit] + "…"


def _node_name(node) -> str:
    return f"{_shown(node.op_type)} node" + (f" {_shown(node.name)}" if node.name else "")


def _checked_nodes(model, path: Path) -> Counter:
    """The graph's operators, each in OPERATORS with its inputs and attributes, at an opset
    in OPSETS; the count of each."""
    graph = model.graph
    ops = Counter(node.op_type for node in graph.node)
    other = sorted(set(ops) - set(OPERATORS))
    if other:
        shown = ", ".join(_shown(op, 40) for op in other[:6]) + (", …" if other[6:] else "")
        raise UserError(f"{path}: the graph uses {shown}, which the encoder sheet's layer "
                        f"does not compute (it reads BERT and DistilBERT exports: MatMul, "
                        f"Add, LayerNormalization, Softmax, Erf, …); {HOW}")
    if graph.sparse_initializer:
        raise UserError(f"{path}: the graph holds sparse initializers, which exporters of "
                        f"BERT do not write; {HOW}")
    versions = {entry.domain or "ai.onnx": entry.version for entry in model.opset_import}
    opset = versions.get("ai.onnx")
    if opset not in OPSETS:
        said = f"opset {opset}" if opset is not None else "no ai.onnx opset"
        raise UserError(f"{path}: the graph declares {said}; the reader reads opsets "
                        f"{OPSETS[0]} … {OPSETS[-1]}: {HOW}")
    for node in graph.node:
        spec = OPERATORS[node.op_type]
        name = _node_name(node)
        if node.domain not in ("", "ai.onnx"):
            raise UserError(f"{path}: {name} is from the operator set {_shown(node.domain)}, "
                            f"not ai.onnx's; {HOW}")
        if opset < spec.since:
            raise UserError(f"{path}: {name} needs opset {spec.since}, and the graph "
                            f"declares {opset}")
        fewest, most = spec.inputs
        given = len(node.input)
        if given < fewest or given > most or not all(node.input[:fewest]):
            wanted = f"{fewest}" if fewest == most else f"{fewest} or more" \
                if most == MANY else f"{fewest} … {most}"
            raise UserError(f"{path}: {name} has {sum(map(bool, node.input))} of its "
                            f"inputs; {node.op_type} takes {wanted}")
        if len(node.output) < 1 or not node.output[0]:
            raise UserError(f"{path}: {name} has no output")
        for attribute in node.attribute:
            _check_attribute(node, attribute, spec, path)
    return ops


def _check_attribute(node, attribute, spec: Operator, path: Path) -> None:
    """The attribute is one the operator's entry lists, of its type and allowed value."""
    from onnx import helper

    allowed = spec.attributes.get(attribute.name)
    where = f"{_node_name(node)}'s attribute {_shown(attribute.name, 40)}"
    if allowed is None:
        raise UserError(f"{path}: {where} is not one the reader knows for {node.op_type} "
                        f"({', '.join(spec.attributes) or 'it takes none'})")
    if attribute.ref_attr_name:
        raise UserError(f"{path}: {where} refers to a function's attribute; {HOW}")
    if isinstance(allowed, str):
        if attribute.type != ATTRIBUTE_TYPES[allowed]:
            raise UserError(f"{path}: {where} must be {allowed}")
        if allowed == EPSILON and not (math.isfinite(attribute.f) and attribute.f >= 0):
            raise UserError(f"{path}: {where} is {attribute.f}; an epsilon is a number ≥ 0")
        return
    value = helper.get_attribute_value(attribute)
    value = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    if not isinstance(value, int | str) or value not in allowed:
        shown = _shown(repr(value), 40)
        raise UserError(f"{path}: {where} is {shown}; the sheet's layer computes "
                        f"{' or '.join(map(repr, allowed))}")


def _tensors_of(graph):
    """Every tensor the graph holds, with where it is: initializers and node attributes."""
    for init in graph.initializer:
        yield init, f"initializer {_shown(init.name)}"
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == ATTRIBUTE_TYPES[TENSOR]:
                yield attribute.t, f"{_node_name(node)}'s {_shown(attribute.name, 40)}"


def _check_tensor(tensor, where: str, path: Path) -> None:
    """The tensor's declared type and shape agree with the data it holds in the file, before
    anything is allocated for it."""
    if tensor.data_location == EXTERNAL or tensor.external_data:
        raise UserError(f"{path}: {where} keeps its data in an external file; the reader "
                        f"reads weights held in the .onnx itself ({EXPORT} saves a model "
                        f"under 2 GB whole)")
    if tensor.HasField("segment"):
        raise UserError(f"{path}: {where} is a segment of a tensor; {HOW}")
    if tensor.data_type not in DTYPES:
        from onnx import TensorProto

        kind = TensorProto.DataType.Name(tensor.data_type) if tensor.data_type in \
            TensorProto.DataType.values() else f"type {tensor.data_type}"
        raise UserError(f"{path}: {where} holds {kind} values; the reader reads "
                        f"{', '.join(name for name, _, _ in DTYPES.values())} tensors")
    dims = list(tensor.dims)
    if len(dims) > MAX_RANK:
        raise UserError(f"{path}: {where} declares {len(dims)} dimensions; a BERT export's "
                        f"tensors have at most {MAX_RANK}")
    if any(d < 0 for d in dims):
        raise UserError(f"{path}: {where} declares a negative dimension "
                        f"({' × '.join(map(str, dims))})")
    count = math.prod(dims)
    name, itemsize, field = DTYPES[tensor.data_type]
    if tensor.HasField("raw_data"):
        held, needed, unit = len(tensor.raw_data), count * itemsize, "bytes"
    else:
        held, needed, unit = len(getattr(tensor, field)), count, "values"
    if held != needed:
        shape = " × ".join(map(str, dims)) or "a scalar"
        raise UserError(f"{path}: {where} declares {shape} {name} values ({needed:,} "
                        f"{unit}) and holds {held:,} {unit}")


def _matmul_weights(graph, tensors: dict, model_type: str,
                    path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Every MatMul weight, named after the linear bias added to its product (…query.bias →
    …query.weight) and stored out×in as nn.Linear stores it; and the outputs of the query,
    key and value projections (output -> module name)."""
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    linear_bias = LINEAR_BIAS[model_type]
    weights, projections = {}, {}
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        weight = next((i for i in node.input if i in tensors and tensors[i].ndim == 2), None)
        if weight is None:
            continue
        if tensors[weight].dtype.kind != "f":
            raise UserError(f"{path}: the MatMul weight {_shown(weight)} holds "
                            f"{tensors[weight].dtype} values; a weight is float, float16 "
                            f"or double")
        adds = [n for n in readers.get(node.output[0], []) if n.op_type == "Add"]
        added = [i for n in adds for i in n.input if i in tensors]
        biases = [i for i in added if linear_bias.search(i)]
        if len(adds) != 1 or len(biases) != 1:
            said = f"adds {', '.join(map(_shown, added))}" if added else "adds no bias"
            raise UserError(f"{path}: the MatMul reading {_shown(weight)} {said}, not one "
                            f"named as a linear module's bias (…attention.self.query.bias, "
                            f"…ffn.lin1.bias, …): its weight cannot be named; {HOW}")
        bias = biases[0]
        name = bias.removesuffix(".bias") + ".weight"
        if name in weights:
            raise UserError(f"{path}: two MatMuls add {_shown(bias)}: which reads "
                            f"{_shown(name)} cannot be told; {HOW}")
        if tensors[bias].shape != tensors[weight].shape[1:]:
            raise UserError(f"{path}: {_shown(bias)} holds {tensors[bias].shape} values and "
                            f"the MatMul weight it follows {tensors[weight].shape}")
        weights[name] = np.asarray(tensors[weight]).T
        module = linear_bias.search(bias).group(1)
        if module in PROJECTIONS[model_type]:
            projections[adds[0].output[0]] = bias.removesuffix(".bias")
    return weights, projections


def _config(graph, ops: Counter, named: dict, model_type: str, made: dict, tensors: dict,
            projections: dict[str, str], heads: int | None, path: Path) -> dict:
    """The config.json values the family tables read, from the graph."""
    from onnx import helper

    eps = set()
    for node in graph.node:
        if node.op_type == "LayerNormalization":
            given = [helper.get_attribute_value(a) for a in node.attribute
                     if a.name == "epsilon"]
            # written back as the shortest decimal of its float32 (1e-12, not 9.99…e-13)
            eps.add(float(str(np.float32(given[0] if given else LN_EPSILON_DEFAULT))))
    if len(eps) != 1:
        raise UserError(f"{path}: its LayerNormalization nodes use "
                        f"{len(eps) or 'no'} epsilon values; the sheet writes one")
    ln_eps = eps.pop()
    gelus = {helper.get_attribute_value(a).decode("utf-8", "replace") for node in graph.node
             if node.op_type == "Gelu" for a in node.attribute if a.name == "approximate"}
    gelus |= {"none"} if any(node.op_type == "Gelu" and not any(
        a.name == "approximate" for a in node.attribute) for node in graph.node) else set()
    found = {name for name, seen in (("gelu", ops["Erf"] or "none" in gelus),
                                     ("gelu_new", "tanh" in gelus), ("relu", ops["Relu"]))
             if seen}
    if len(found) != 1:
        said = f"both {' and '.join(sorted(found))}" if found else \
            "no Erf or Gelu (GELU) or Relu"
        raise UserError(f"{path}: {said} in its graph: the sheet computes one activation "
                        f"in every layer")
    activation = found.pop()
    layers = len({number.group(1) for name in named
                  if (number := LAYER_NUMBER.search(name)) is not None})
    query = next((name for name in named if name.endswith(
        PROJECTIONS[model_type][0] + ".weight")), None)
    inner = next((name for name in named if name.endswith(INTERMEDIATE[model_type])), None)
    if query is None or inner is None or named[query].ndim != 2 or named[inner].ndim != 2:
        missing = PROJECTIONS[model_type][0] + ".weight" if query is None else \
            INTERMEDIATE[model_type]
        raise UserError(f"{path}: no 2-dimensional …{missing} read from its graph; {HOW}")
    d_model, d_ff = named[query].shape[1], named[inner].shape[0]
    given = _graph_heads(graph, made, tensors, projections, d_model, path)
    if given is None and heads is None:
        raise UserError(f"{path}: the graph does not tell the number of heads (its reshapes "
                        f"of the query, key and value take their sizes from the input); "
                        f"pass --heads")
    if model_type == "bert":
        config = {"model_type": "bert", "hidden_size": d_model,
                  "num_attention_heads": given or heads, "num_hidden_layers": layers,
                  "intermediate_size": d_ff, "hidden_act": activation,
                  "layer_norm_eps": ln_eps}
    else:
        if ln_eps != 1e-12:
            raise UserError(f"{path}: its LayerNormalization nodes use epsilon {ln_eps}; "
                            f"DistilBERT's layer (and the sheet) uses 1e-12")
        config = {"model_type": "distilbert", "dim": d_model, "n_heads": given or heads,
                  "n_layers": layers, "hidden_dim": d_ff, "activation": activation}
    if given is None:
        config[NOT_IN_GRAPH] = ["num_attention_heads" if model_type == "bert" else "n_heads"]
    return config


def _graph_heads(graph, made: dict, tensors: dict, projections: dict[str, str],
                 d_model: int, path: Path) -> int | None:
    """The heads from the reshapes of the query, key and value projections into (batch, n,
    heads, d_k): their last two sizes, constants (heads or −1, d_k); None when every such
    reshape takes them from the input."""
    told = {}
    for node in graph.node:
        if node.op_type != "Reshape" or node.input[0] not in projections:
            continue
        tail = _constant_tail(node.input[1], made, tensors)
        if tail is None:
            continue
        h, d_k = tail
        if h == -1 and 0 < d_k <= d_model and d_model % d_k == 0:
            told[projections[node.input[0]]] = d_model // d_k
        elif d_k == -1 and 0 < h <= d_model and d_model % h == 0:
            told[projections[node.input[0]]] = h
        elif h > 0 and h * d_k == d_model:
            told[projections[node.input[0]]] = h
        else:
            raise UserError(f"{path}: its reshape of {_shown(projections[node.input[0]])} "
                            f"into (…, {h}, {d_k}) does not split the width {d_model} into "
                            f"heads")
    if len(set(told.values())) > 1:
        said = ", ".join(f"{module} {h}" for module, h in sorted(told.items())[:4])
        raise UserError(f"{path}: its reshapes give different numbers of heads ({said})")
    return next(iter(told.values()), None)


def _constant_tail(name: str, made: dict, tensors: dict) -> tuple[int, int] | None:
    """The last two values of a shape that is a constant, or a Concat whose last parts are;
    None when the graph computes them."""
    def constant(name: str) -> list | None:
        from onnx import helper, numpy_helper

        if name in tensors:
            return np.asarray(tensors[name]).ravel().tolist()
        node = made.get(name)
        if node is None or node.op_type != "Constant" or len(node.attribute) != 1:
            return None
        value = node.attribute[0]
        if value.name == "value":
            return numpy_helper.to_array(value.t).ravel().tolist()
        value = helper.get_attribute_value(value)
        return value if isinstance(value, list) else [value]

    shape = made.get(name)
    parts = list(shape.input) if shape is not None and shape.op_type == "Concat" else [name]
    tail: list = []
    for part in reversed(parts):
        values = constant(part)
        if values is None:
            return None
        tail = values + tail
        if len(tail) >= 2:
            break
    if len(tail) < 2 or not all(isinstance(v, int) for v in tail[-2:]):
        return None
    return tail[-2], tail[-1]
