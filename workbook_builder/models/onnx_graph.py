"""An ONNX export of a BERT or DistilBERT encoder as a checkpoint: its initializers under
the module names the family tables read. Biases and LayerNorms keep their module names
(`…encoder.layer.0.attention.self.query.bias`); a MatMul weight may be anonymous
(`onnx::MatMul_470`, stored in×out), so each is named by following the graph: the MatMul
that reads it, and the Add that adds a named bias to its output. The sizes the config would
give come from the graph: LayerNormalization's epsilon, the activation (Erf: exact GELU),
the heads from the reshape into (…, heads, d_k). A graph with an operator the sheet's layer
does not compute is refused naming it. Needs the `onnx` package (an optional extra)."""

import re
from collections import Counter
from pathlib import Path

import numpy as np

from workbook_builder.book.reading import regular_file
from workbook_builder.errors import UserError
from workbook_builder.models.files import Checkpoint

ONNX_EXTRA = "pip install onnx onnxruntime"
# what exporters of BertModel / DistilBertModel (opset ≥ 17) write: the layer, the shapes
# and masks around it, and the mean pooling some sentence-encoder exports add at the end
OPERATORS = {"Add", "And", "Cast", "Clip", "Concat", "Constant", "ConstantOfShape", "Div",
             "Equal", "Erf", "Expand", "Flatten", "Gather", "GatherElements",
             "GreaterOrEqual", "Identity", "IsNaN", "LayerNormalization", "MatMul", "Mul",
             "Range", "ReduceSum", "Relu", "Reshape", "Shape", "Slice", "Softmax", "Sqrt",
             "Squeeze", "Sub", "Transpose", "Unsqueeze", "Where"}
FAMILY_MARKS = {"bert": "encoder.layer.0.", "distilbert": "transformer.layer.0."}
LAYER_NUMBER = re.compile(r"(?:encoder|transformer)\.layer\.(\d+)\.")


def onnx_checkpoint(path: Path, heads: int | None = None) -> Checkpoint:
    """The export at `path` as a Checkpoint with a config.json made from its graph."""
    regular_file(path, "checkpoint")
    try:
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise UserError(f"{path}: reading an ONNX file needs the onnx package "
                        f"({ONNX_EXTRA})") from None
    try:
        model = onnx.load(str(path))
    except Exception as exc:  # protobuf raises its own DecodeError
        raise UserError(f"{path}: not a readable ONNX file ({type(exc).__name__})") from None
    graph = model.graph
    ops = Counter(node.op_type for node in graph.node)
    other = sorted(set(ops) - OPERATORS)
    if other:
        raise UserError(f"{path}: the graph uses {', '.join(other)}, which the encoder "
                        f"sheet's layer does not compute (it reads BERT and DistilBERT "
                        f"exports: MatMul, Add, LayerNormalization, Softmax, Erf, …)")
    tensors = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    made = {o: node for node in graph.node for o in node.output}
    # an exporter may hand an initializer on through Identity nodes (shared values)
    for node in graph.node:
        if node.op_type == "Identity" and node.input[0] in tensors:
            tensors.setdefault(node.output[0], tensors[node.input[0]])
    named = {name: value for name, value in tensors.items() if not name.startswith("onnx::")
             and "." in name}
    named.update(_matmul_weights(graph, tensors, path))
    model_type = next((kind for kind, mark in FAMILY_MARKS.items()
                       if any(mark in name for name in named)), None)
    if model_type is None:
        raise UserError(f"{path}: no BERT or DistilBERT layer names among its initializers")
    config = _config(graph, ops, named, model_type, made, tensors, heads, path)
    shapes = {name: tuple(value.shape) for name, value in named.items()}
    return Checkpoint(str(path), shapes, lambda name: np.asarray(named[name]), config)


def _matmul_weights(graph, tensors: dict, path: Path) -> dict[str, np.ndarray]:
    """Every MatMul weight, named after the bias added to its product (…query.bias →
    …query.weight) and stored out×in as nn.Linear stores it."""
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    weights = {}
    for node in graph.node:
        if node.op_type != "MatMul":
            continue
        weight = next((i for i in node.input if i in tensors and tensors[i].ndim == 2), None)
        if weight is None:
            continue
        adds = [n for n in readers.get(node.output[0], []) if n.op_type == "Add"]
        bias = next((i for n in adds for i in n.input
                     if i in tensors and i.endswith(".bias")), None)
        if bias is None:
            raise UserError(f"{path}: the MatMul reading {weight} adds no named bias; the "
                            f"sheet's projections are X·W + b")
        weights[bias.removesuffix(".bias") + ".weight"] = np.asarray(tensors[weight]).T
    return weights


def _config(graph, ops: Counter, named: dict, model_type: str, made: dict, tensors: dict,
            heads: int | None, path: Path) -> dict:
    """The config.json values the family tables read, from the graph."""
    eps = {round(a.f, 20) for node in graph.node if node.op_type == "LayerNormalization"
           for a in node.attribute if a.name == "epsilon"}
    if len(eps) != 1:
        raise UserError(f"{path}: its LayerNormalization nodes use "
                        f"{len(eps) or 'no'} epsilon values; the sheet writes one")
    activation = "gelu" if ops["Erf"] else "relu" if ops["Relu"] else None
    if activation is None or (ops["Erf"] and ops["Relu"]):
        raise UserError(f"{path}: no Erf (exact GELU) or Relu in its graph: not an "
                        f"activation the sheet computes")
    layers = len({found.group(1) for name in named
                  if (found := LAYER_NUMBER.search(name)) is not None})
    query = next(name for name in named if name.endswith(
        "attention.self.query.weight" if model_type == "bert" else "attention.q_lin.weight"))
    d_model = named[query].shape[1]
    heads = heads or _heads(graph, made, tensors, d_model, path)
    width = "hidden_size" if model_type == "bert" else "dim"
    config = {"model_type": model_type, width: d_model,
              ("num_attention_heads" if model_type == "bert" else "n_heads"): heads,
              ("num_hidden_layers" if model_type == "bert" else "n_layers"): layers,
              ("hidden_act" if model_type == "bert" else "activation"): activation}
    if model_type == "bert":
        config["layer_norm_eps"] = float(eps.pop())
    return config


def _heads(graph, made: dict, tensors: dict, d_model: int, path: Path) -> int:
    """The heads from the reshape of Q, K and V into (batch, n, heads, d_k): its last two
    sizes are constants, heads or −1 and d_k."""
    def constant(name: str):
        node = made.get(name)
        if name in tensors:
            return np.asarray(tensors[name]).ravel().tolist()
        if node is not None and node.op_type == "Constant":
            from onnx import numpy_helper

            return numpy_helper.to_array(node.attribute[0].t).ravel().tolist()
        return None

    found = set()
    for node in graph.node:
        shape = made.get(node.input[1]) if node.op_type == "Reshape" else None
        if shape is None or shape.op_type != "Concat" or len(shape.input) != 4:
            continue
        parts = [constant(name) for name in shape.input[2:]]
        if any(p is None or len(p) != 1 for p in parts):
            continue
        (h,), (d_k,) = parts
        if d_k > 0 and d_model % d_k == 0 and h in (-1, d_model // d_k):
            found.add(d_model // d_k)
    if len(found) != 1:
        raise UserError(f"{path}: the number of heads is not read from its graph; pass "
                        f"--heads")
    return found.pop()
