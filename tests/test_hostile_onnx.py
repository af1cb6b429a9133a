"""Hostile ONNX checkpoints for the `encoder` kind, refused as a user meets them: the command
line in a process of its own within 1 GB of address space (`prlimit --as`) and 60 s exits 2
with one line on stderr and no traceback. Initializers whose declared shape or type lies
about their data, kept in external files or of a type no weight has; nodes without their
inputs, with attributes the sheet's layer does not compute, from another operator set or
opset; a renamed bias; a --heads the graph contradicts or cannot tell; files too large or
not ONNX. The graphs are small: made with onnx.helper, or a tiny BertModel exported by
torch.onnx and changed with onnx. What the reader accepts beyond the plain export (a
LayerNormalization without epsilon, opset 20's Gelu) is held to onnxruntime and to
transformers in float64."""

from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import capped, requires_prlimit
from helpers.models import last_hidden_state

from workbook_builder import api
from workbook_builder.models.onnx_graph import EXPORT, MAX_ONNX_BYTES

pytestmark = [pytest.mark.models, requires_prlimit, pytest.mark.skipif(
    find_spec("onnx") is None, reason="onnx is not installed (pip install onnx onnxruntime)")]
requires_torch = pytest.mark.skipif(
    find_spec("torch") is None or find_spec("transformers") is None
    or find_spec("onnxruntime") is None,
    reason="torch, transformers and onnxruntime are not installed")

D, HEADS, D_FF, VOCAB = 10, 2, 14, 17
QUERY_BIAS = "encoder.layer.0.attention.self.query.bias"


def refused(path: Path, *flags) -> str:
    """`build encoder --checkpoint PATH` refused: exit 2, one line, no traceback, no file."""
    out = path.parent / "out.xlsx"
    done = capped("build", "encoder", "--checkpoint", path, "--token-ids", "1,2,3", *flags,
                  "-o", out)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert not out.exists()
    return lines[0]


# -- initializers: checked against their data before anything is allocated ------------------

def one_node_graph(path: Path, *tensors, nodes=None, opset: int = 17) -> Path:
    """A graph of one Identity node (or `nodes`) holding `tensors` beside a LayerNorm weight
    named as BERT's, so the family is found."""
    from onnx import TensorProto, helper

    norm = helper.make_tensor("encoder.layer.0.output.LayerNorm.weight", TensorProto.FLOAT,
                              [D], np.ones(D, np.float32).tobytes(), raw=True)
    graph = helper.make_graph(
        nodes or [helper.make_node("Identity", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D])],
        initializer=[norm, *tensors])
    return save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)


def save(model, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def raw(name: str, data_type: int, dims, data: bytes):
    from onnx import TensorProto

    tensor = TensorProto(name=name, data_type=data_type, dims=dims)
    tensor.raw_data = data
    return tensor


def typed(name: str, data_type: int, dims, **fields):
    from onnx import TensorProto

    tensor = TensorProto(name=name, data_type=data_type, dims=dims)
    for field, values in fields.items():
        getattr(tensor, field).extend(values)
    return tensor


def external(name: str):
    from onnx import TensorProto

    tensor = raw(name, TensorProto.FLOAT, [D], b"")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", "../../../etc/passwd"
    return tensor


def lying_constant():
    from onnx import TensorProto, helper

    return [helper.make_node("Constant", [], ["c"], value=raw("", TensorProto.FLOAT,
                                                               [10**6, 10**6], bytes(640))),
            helper.make_node("Identity", ["x"], ["y"])]


FLOAT, INT64, STRING, BOOL, COMPLEX64, UNDEFINED = 1, 7, 8, 9, 14, 0
TENSORS = {
    # 10¹² float32 declared over 640 bytes
    "bomb": ([raw("w", FLOAT, [10**6, 10**6], bytes(640))], None,
             "initializer w declares 1000000 × 1000000 FLOAT values (4,000,000,000,000 "
             "bytes) and holds 640 bytes"),
    "2^63-1": ([raw("w", FLOAT, [2**63 - 1], bytes(640))], None,
               "initializer w declares 9223372036854775807 FLOAT values "
               "(36,893,488,147,419,103,228 bytes) and holds 640 bytes"),
    "negative": ([raw("w", FLOAT, [-1, D], bytes(640))], None,
                 "initializer w declares a negative dimension (-1 × 10)"),
    "typed-short": ([typed("w", FLOAT, [D], float_data=[1.0, 2.0, 3.0])], None,
                    "initializer w declares 10 FLOAT values (10 values) and holds 3 values"),
    "string": ([typed("w", STRING, [1], string_data=[b"x"])], None,
               "initializer w holds STRING values; the reader reads FLOAT, DOUBLE, FLOAT16, "
               "INT64, INT32, BOOL tensors"),
    "undefined": ([raw("w", UNDEFINED, [1], bytes(4))], None,
                  "initializer w holds UNDEFINED values"),
    "complex": ([raw("w", COMPLEX64, [D], bytes(8 * D))], None,
                "initializer w holds COMPLEX64 values"),
    "int-weight": ([raw(QUERY_BIAS, INT64, [D], bytes(8 * D))], None,
                   f"initializer {QUERY_BIAS} holds int64 values where a weight goes; a "
                   f"weight is float, float16 or double"),
    "bool-weight": ([raw("encoder.layer.0.output.LayerNorm.bias", BOOL, [D], bytes(D))], None,
                    "initializer encoder.layer.0.output.LayerNorm.bias holds bool values "
                    "where a weight goes"),
    "external": ([external(QUERY_BIAS)], None,
                 f"initializer {QUERY_BIAS} keeps its data in an external file; the reader "
                 f"reads weights held in the .onnx itself ({EXPORT} saves a model under 2 GB "
                 f"whole)"),
    "constant": ([], lying_constant,
                 "Constant node's value declares 1000000 × 1000000 FLOAT values "
                 "(4,000,000,000,000 bytes) and holds 640 bytes"),
}


@pytest.mark.parametrize("case", list(TENSORS))
def test_a_tensor_that_lies_about_its_data_is_one_line(tmp_path, case):
    tensors, nodes, says = TENSORS[case]
    path = one_node_graph(tmp_path / "bad.onnx", *tensors, nodes=nodes and nodes())
    line = refused(path)
    print(line)
    assert says in line


def test_a_file_over_the_bound_or_not_onnx_is_one_line(tmp_path):
    """Over MAX_ONNX_BYTES: refused by its size before a byte is read (the file is sparse);
    900 MB under it that are not ONNX, and a few bytes of garbage, are one line too."""
    huge = tmp_path / "huge.onnx"
    with open(huge, "wb") as handle:
        handle.truncate(MAX_ONNX_BYTES + 1)
    assert refused(huge).endswith(f"huge.onnx: {MAX_ONNX_BYTES + 1:,} bytes, over the "
                                  f"{MAX_ONNX_BYTES:,} an ONNX checkpoint may have (a "
                                  f"BERT-base export is about 440 MB)")
    zeros = tmp_path / "zeros.onnx"
    with open(zeros, "wb") as handle:
        handle.truncate(900 * 2**20)
    line = refused(zeros)  # within 1 GB: the bytes are read, the message is not held
    print(line)
    assert line.endswith(("zeros.onnx: its message does not fit in memory; not an ONNX file "
                          "this reader can hold", "zeros.onnx: not a readable ONNX file "
                                                  "(DecodeError)"))
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\xff" * 64)
    assert refused(garbage).endswith("garbage.onnx: not a readable ONNX file (DecodeError)")


# -- nodes: the operators, attributes and opsets of the table --------------------------------

def make_node(*args, **kwargs):
    from onnx import helper

    return [helper.make_node(*args, **kwargs)]


NODES = {
    "reshape-without-shape": (make_node("Reshape", ["x"], ["y"]), 17,
                              "Reshape node has 1 of its inputs; Reshape takes 2"),
    "softmax-over-rows": (make_node("Softmax", ["x"], ["y"], axis=0), 17,
                          "Softmax node's attribute axis is 0; the sheet's layer computes -1"),
    "unknown-attribute": (make_node("MatMul", ["x", "x"], ["y"], transA=1), 17,
                          "MatMul node's attribute transA is not one the reader knows for "
                          "MatMul (it takes none)"),
    "other-domain": (make_node("LayerNormalization", ["x", "x", "x"], ["y"],
                               domain="com.microsoft"), 17,
                     "LayerNormalization node is from the operator set com.microsoft, not "
                     "ai.onnx's"),
    "gelu-before-20": (make_node("Gelu", ["x"], ["y"]), 17,
                       "Gelu node needs opset 20, and the graph declares 17"),
    "gelu-approximation": (make_node("Gelu", ["x"], ["y"], approximate="sigmoid"), 20,
                           "Gelu node's attribute approximate is 'sigmoid'; the sheet's "
                           "layer computes 'none' or 'tanh'"),
    "opset-14": (make_node("Identity", ["x"], ["y"]), 14,
                 f"the graph declares opset 14; the reader reads opsets 17 … 20: export the "
                 f"BertModel or DistilBertModel with {EXPORT}"),
    "unknown-operator": (make_node("Attention", ["x"], ["y"], domain="com.microsoft"), 17,
                         "the graph uses Attention, which the encoder sheet's layer does not "
                         "compute"),
}


@pytest.mark.parametrize("case", list(NODES))
def test_a_node_outside_the_table_is_one_line(tmp_path, case):
    nodes, opset, says = NODES[case]
    line = refused(one_node_graph(tmp_path / "bad.onnx", nodes=nodes, opset=opset))
    print(line)
    assert says in line


# -- exports of a tiny BertModel, changed -----------------------------------------------------

def bert(layer_norm_eps: float = 1e-12, embedding_scale: float = 0.4):
    """A seeded random BertModel (d = 10, 2 heads, 2 layers); `embedding_scale` the spread
    of its embedding rows (small: the first LayerNorm's epsilon shows)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(5)
    model = BertModel(BertConfig(vocab_size=VOCAB, hidden_size=D, num_hidden_layers=2,
                                 num_attention_heads=HEADS, intermediate_size=D_FF,
                                 max_position_embeddings=24, layer_norm_eps=layer_norm_eps),
                      add_pooling_layer=False)
    with torch.no_grad():
        for name, value in model.named_parameters():
            value.normal_(0, embedding_scale if "embeddings" in name and "LayerNorm" not in
                          name else 0.4)
    return model.eval()


def export(model, path: Path, opset: int = 17, dynamic: bool = True) -> Path:
    """`model`'s last hidden state exported as EXPORT says (the length dynamic or fixed)."""
    import warnings

    import torch

    ids = torch.tensor([[2, 5, 7]])
    axes = {name: {1: "n"} for name in ("input_ids", "attention_mask", "last_hidden_state")}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(last_hidden_state(model), (ids, torch.ones_like(ids)), str(path),
                          input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=opset,
                          dynamo=False, dynamic_axes=axes if dynamic else None)
    return path


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    if find_spec("torch") is None or find_spec("transformers") is None:
        pytest.skip("torch and transformers are not installed")
    return export(bert(), tmp_path_factory.mktemp("onnx") / "bert.onnx")


def changed(source: Path, path: Path, change) -> Path:
    import onnx

    model = onnx.load(str(source))
    change(model)
    return save(model, path)


def rename(model, end: str, new: str) -> None:
    """The initializer whose name ends with `end` renamed `new`, and every input reading it."""
    old = next(init.name for init in model.graph.initializer if init.name.endswith(end))
    for init in model.graph.initializer:
        if init.name == old:
            init.name = new
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new


def drop_attribute(op_type: str, attribute: str):
    def change(model):
        for node in model.graph.node:
            if node.op_type == op_type:
                kept = [a for a in node.attribute if a.name != attribute]
                del node.attribute[:]
                node.attribute.extend(kept)
    return change


def first_matmul_weight(model) -> str:
    names = {init.name for init in model.graph.initializer}
    return next(i for node in model.graph.node if node.op_type == "MatMul"
                for i in node.input if i in names)


@requires_torch
def test_a_renamed_bias_leaves_its_weight_unnamed(tmp_path, exported):
    import onnx

    weight = first_matmul_weight(onnx.load(str(exported)))
    path = changed(exported, tmp_path / "renamed.onnx",
                   lambda model: rename(model, QUERY_BIAS, "b0"))
    line = refused(path)
    print(line)
    assert f"the MatMul reading {weight} adds b0, not one named as a linear module's bias " \
           f"(…attention.self.query.bias, …ffn.lin1.bias, …): its weight cannot be named; " \
           f"export the BertModel or DistilBertModel with {EXPORT}" in line


@requires_torch
def test_a_reshape_without_its_shape_is_one_line(tmp_path, exported):
    def cut(model):
        reshape = next(node for node in model.graph.node if node.op_type == "Reshape")
        del reshape.input[1:]
    line = refused(changed(exported, tmp_path / "cut.onnx", cut))
    assert "Reshape node /inner/" in line and "has 1 of its inputs; Reshape takes 2" in line


@requires_torch
def test_heads_the_graph_gives_refuse_another_heads(tmp_path, exported):
    """Dynamic length (the reshape's sizes a Concat of constants) and fixed length (one
    Constant): the graph gives 2 heads, --heads 5 is refused naming the flag, the file and
    the graph's value; --heads 2 builds."""
    static = export(bert(), tmp_path / "static.onnx", dynamic=False)
    for path in (exported, static):
        line = refused(path, "--heads", "5")
        assert f"--heads 5 contradicts the checkpoint ({path}'s graph: " \
               f"num_attention_heads gives 2)" in line and "leave --heads out" in line, line
        book = api.build("encoder", checkpoint=path, token_ids=[1, 2, 3], heads=2,
                         layout="blocks")
        assert book.params.heads == 2


@requires_torch
def test_heads_the_graph_does_not_give_need_heads(tmp_path):
    """Reshapes whose sizes the graph computes (here through an Identity): without --heads
    one line asks for it; with it the config says the graph did not give it."""
    from onnx import helper

    from workbook_builder.models.onnx_graph import NOT_IN_GRAPH, onnx_checkpoint

    def computed(model):
        for number, node in enumerate([n for n in model.graph.node if n.op_type == "Reshape"]):
            hidden = f"computed_shape_{number}"
            model.graph.node.append(helper.make_node("Identity", [node.input[1]], [hidden]))
            node.input[1] = hidden
    static = export(bert(), tmp_path / "static.onnx", dynamic=False)
    path = changed(static, tmp_path / "computed.onnx", computed)
    assert refused(path).endswith(
        "computed.onnx: the graph does not tell the number of heads (its reshapes of the "
        "query, key and value take their sizes from the input); pass --heads")
    config = onnx_checkpoint(path, 2).config
    assert (config["num_attention_heads"], config[NOT_IN_GRAPH]) == (2, ["num_attention_heads"])


@requires_torch
def test_the_made_config_holds_what_the_graph_fixes(exported):
    from workbook_builder.models.onnx_graph import onnx_checkpoint

    assert onnx_checkpoint(exported).config == {
        "model_type": "bert", "hidden_size": D, "num_attention_heads": HEADS,
        "num_hidden_layers": 2, "intermediate_size": D_FF, "hidden_act": "gelu",
        "layer_norm_eps": 1e-12}


def float32_oracles(model, path: Path, ids) -> tuple[np.ndarray, np.ndarray, float]:
    """`model` in float64 (its last hidden state), onnxruntime running `path`, and 4 times
    the error float32 makes in this computation (`model` in float32 against float64)."""
    import onnxruntime
    import torch

    with torch.no_grad():
        exact = model.double()(torch.tensor([ids])).last_hidden_state[0].numpy()
        single = model.float()(torch.tensor([ids])).last_hidden_state[0].double().numpy()
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    runtime = session.run(None, {"input_ids": np.array([ids]),
                                 "attention_mask": np.ones((1, len(ids)), np.int64)})[0][0]
    return exact, runtime, max(4 * float(np.abs(single - exact).max()),
                               float(np.finfo(np.float32).eps * np.abs(exact).max()))


def relative(got, exp) -> float:
    return float(np.abs(got - exp).max() / np.abs(exp).max())


@requires_torch
def test_a_layernorm_without_epsilon_takes_the_onnx_default(tmp_path):
    """Embeddings spread like 1e-5 (so the epsilon shows): with its epsilon attributes
    removed, the graph computes LayerNorm with ONNX's default 1e-5, and so does the sheet:
    it equals BertModel with layer_norm_eps 1e-5 in float64 to 1e-12 and onnxruntime to
    float32 rounding, and is far from the same model with 1e-12."""
    ids = [2, 6, 8, 10, 15, 3]
    path = changed(export(bert(embedding_scale=0.003), tmp_path / "eps.onnx"),
                   tmp_path / "default.onnx", drop_attribute("LayerNormalization", "epsilon"))
    book = api.build("encoder", checkpoint=path, token_ids=ids, layout="blocks")
    assert book.params.ln_eps == 1e-5
    got = api.read_blocks(book)["OUTPUT_L2"].to_numpy(dtype=float)
    exact, runtime, tolerance = float32_oracles(bert(1e-5, 0.003), path, ids)
    other, _, _ = float32_oracles(bert(1e-12, 0.003), path, ids)
    print(f"|sheet − onnxruntime| = {np.abs(got - runtime).max():.1e}, tolerance "
          f"{tolerance:.1e}; |BertModel eps 1e-12 − eps 1e-5| = {np.abs(other - exact).max():.1e}")
    assert relative(got, exact) < 1e-12
    assert np.abs(got - runtime).max() <= tolerance < np.abs(other - exact).max()


@requires_torch
def test_opset_20_s_gelu_builds_as_bert_computes(tmp_path):
    """The TorchScript exporter at opset 20 writes Gelu (approximate none) for Erf: the
    sheet equals BertModel in float64 to 1e-12 and onnxruntime to float32 rounding."""
    import onnx

    ids = [2, 6, 8, 10, 15, 3]
    path = export(bert(), tmp_path / "opset20.onnx", opset=20)
    assert "Gelu" in {node.op_type for node in onnx.load(str(path)).graph.node}
    book = api.build("encoder", checkpoint=path, token_ids=ids, layout="blocks")
    got = api.read_blocks(book)["OUTPUT_L2"].to_numpy(dtype=float)
    exact, runtime, tolerance = float32_oracles(bert(), path, ids)
    assert relative(got, exact) < 1e-12
    assert np.abs(got - runtime).max() <= tolerance
    assert api.check(book).passed


@requires_torch
def test_torch_s_default_export_is_refused_saying_how_to_export(tmp_path):
    """torch 2.13's torch.onnx.export defaults to the dynamo exporter (it needs onnxscript):
    its graph (opset 20, GatherND, constants folded) is refused with the export to use."""
    pytest.importorskip("onnxscript")
    import warnings

    import torch

    model = bert()

    ids = torch.tensor([[2, 5, 7]])
    path = tmp_path / "dynamo.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(last_hidden_state(model), (ids, torch.ones_like(ids)), str(path),
                          input_names=["input_ids", "attention_mask"])
    line = refused(path)
    print(line)
    assert line.endswith(f"export the BertModel or DistilBertModel with {EXPORT}")


@requires_torch
def test_a_distilbert_graph_with_another_epsilon_is_one_line(tmp_path):
    """DistilBERT's code fixes every LayerNorm's epsilon at 1e-12 (the sheet too): a graph
    whose LayerNormalization nodes use ONNX's default 1e-5 instead is refused, not read as
    1e-12."""
    import torch
    from transformers import DistilBertConfig, DistilBertModel

    torch.manual_seed(5)
    model = DistilBertModel(DistilBertConfig(vocab_size=VOCAB, dim=D, n_layers=2,
                                             n_heads=HEADS, hidden_dim=D_FF,
                                             max_position_embeddings=24)).eval()
    path = changed(export(model, tmp_path / "distilbert.onnx"), tmp_path / "eps.onnx",
                   drop_attribute("LayerNormalization", "epsilon"))
    assert refused(path).endswith("eps.onnx: its LayerNormalization nodes use epsilon 1e-05; "
                                  "DistilBERT's layer (and the sheet) uses 1e-12")
