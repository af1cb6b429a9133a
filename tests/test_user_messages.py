"""What the terminal is told, and messages that name what the user gave.

- Every name and text the command line prints, on stdout and stderr, reaches the terminal
  with its control characters escaped (`\\x1b`), whichever command prints it: they all pass
  through one stream (cli/printing.py `terminal_output`); `check --json` gives them as
  JSON's own escapes, so it still reads back. Names in other scripts (CJK, Cyrillic) print
  as they are.
- An interrupt says what is on disk whenever it lands: before the file moves into place
  ("nothing was written (out.xlsx is as it was)") or after ("out.xlsx was written in full").
- Token ids outside the checkpoint's vocabulary are refused naming the flag typed, the
  vocabulary and the tensor it comes from, before a tokenizer or a table sees them (a
  tokenizer raised on -1 and 2³²); a text too long for the model names the flag typed
  (--text, --token-ids, --text2, --token-ids2).

The checkpoints are written with NumPy (`helpers.numpy_models`: no PyTorch); the hostile
token ids run the command line in a process of its own within 1 GB and 60 s."""

import errno
import io
import json
import os
import signal
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
from helpers.cli import (
    capped,
    cli,
    one_line_error,
    requires_prlimit,
    run_cli,
    start,
    terminate_once,
)
from helpers.numpy_models import (
    BERT_CONFIG,
    HEADS,
    LLAMA_CONFIG,
    MAMBA_RANK,
    POSITIONS,
    VOCAB,
    D,
    bert_weights,
    gpt2_weights,
    mamba_weights,
    model_folder,
    unbiased_llama_weights,
)

from workbook_builder import api
from workbook_builder.book import files
from workbook_builder.cli import app
from workbook_builder.cli.printing import EscapingStream, on_disk
from workbook_builder.cli.progress import Progress
from workbook_builder.teaching import classroom

ESCAPE = "\x1b[31m"  # red from here on, if the terminal obeys it
SHOWN = "\\x1b[31m"
SMALL = ["--seq-len", "2", "--d-model", "2", "--d-k", "2"]
requires_tokenizers = pytest.mark.skipif(find_spec("tokenizers") is None,
                                         reason="tokenizers is not installed")


def raw_control(text: str) -> list[str]:
    """The control characters in `text` other than line breaks."""
    return [c for c in text if not c.isprintable() and c != "\n"]


# -- one place escapes what the terminal is given ---------------------------------------------

def test_build_check_and_a_refusal_print_an_escaped_file_name(tmp_path):
    out = tmp_path / f"a{ESCAPE}b.xlsx"
    built = run_cli("build", "attention", "-o", out, *SMALL)
    assert built.returncode == 0, built.stderr
    assert built.stdout.startswith(f"wrote {tmp_path}/a{SHOWN}b.xlsx: kind attention")
    checked = run_cli("check", out)
    assert checked.returncode == 0 and f"a{SHOWN}b.xlsx: kind attention" in checked.stdout
    again = run_cli("build", "attention", "-o", out, *SMALL)
    assert one_line_error(again) == (f"attnsheets: error: {tmp_path}/a{SHOWN}b.xlsx already "
                                     f"exists; pass --force to replace it")
    for ran in (built, checked, again):
        assert raw_control(ran.stdout + ran.stderr) == [], ran


def test_check_json_escapes_a_name_as_json_does(tmp_path):
    """DEL and C1 controls (0x9b is a terminal's CSI) pass json.dumps as they are: they
    reach the terminal as JSON's escapes, and the JSON still reads back."""
    out = tmp_path / f"a{ESCAPE}\x7f\x9b[2J.xlsx"
    api.build("attention", out, seq_len=2, d_model=2, d_k=2)
    ran = run_cli("check", out, "--json")
    assert ran.returncode == 0, ran.stderr
    assert raw_control(ran.stdout) == [] and "\\u001b[31m\\u007f\\u009b[2J" in ran.stdout
    assert json.loads(ran.stdout)["path"] == str(out)


def test_pdf_of_a_folder_prints_the_escaped_name_of_each_pdf(tmp_path, monkeypatch):
    folder = tmp_path / "handouts"
    folder.mkdir()
    api.build("attention", folder / f"x{ESCAPE}.xlsx", seq_len=2, d_model=2, d_k=2)
    printed = []
    monkeypatch.setattr(api, "export_pdfs",  # LibreOffice's part: not what is tested here
                        lambda handouts, *args: printed.extend(h.pdf for h in handouts))
    ran = cli("pdf", folder, "--quiet")
    assert ran.returncode == 0, ran.stderr
    assert printed == [folder / f"x{ESCAPE}.pdf"]
    assert ran.stdout == f"wrote {folder}/x{SHOWN}.pdf\n"


def test_class_and_an_argument_argparse_prints_are_escaped(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("id\na1\n")
    out = tmp_path / f"class{ESCAPE}"
    made = cli("class", "attention", "--roster", roster, "--out", out, "--exercise",
               "WEIGHTS", *SMALL)
    assert made.returncode == 0, made.stderr
    assert f"to {tmp_path}/class{SHOWN} (attention" in made.stdout
    unknown = cli("list", f"extra{ESCAPE}")  # argparse writes this line itself
    assert one_line_error(unknown) == (f"attnsheets: error: unrecognized arguments: "
                                       f"extra{SHOWN} (see --help)")
    for ran in (made, unknown):
        assert raw_control(ran.stdout + ran.stderr) == [], ran


def test_demo_refusing_its_folder_names_it_escaped(tmp_path):
    out = tmp_path / f"demo{ESCAPE}"
    out.write_text("a file")
    ran = run_cli("demo", "--out", out, "--no-model", "--quiet")
    assert one_line_error(ran) == (f"attnsheets: error: {tmp_path}/demo{SHOWN} is a file, "
                                   f"not a folder")


def test_a_name_that_is_not_utf8_prints_escaped_instead_of_failing(tmp_path):
    out = os.fsencode(tmp_path) + b"/caf\xe9.xlsx"  # Latin-1 bytes: not UTF-8
    built = subprocess.run([sys.executable, "-m", "workbook_builder", "build", "attention",
                            "-o", out, *SMALL], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    assert built.stdout.startswith(f"wrote {tmp_path}/caf\\udce9.xlsx: kind attention")


def test_foreign_names_print_as_they_are(tmp_path):
    out = tmp_path / "注意力 работа.xlsx"
    ran = cli("build", "attention", "-o", out, *SMALL)
    assert ran.stdout.startswith(f"wrote {out}: kind attention"), ran


def test_the_progress_line_keeps_its_own_controls_and_escapes_the_message():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    progress = Progress(stream=EscapingStream(terminal))
    progress(f"checking a{ESCAPE}.xlsx")
    progress.clear()
    shown = terminal.getvalue()
    assert shown.startswith(f"\r\x1b[Kchecking a{SHOWN}.xlsx (") and shown.endswith("\r\x1b[K")


def test_the_streams_are_put_back_after_a_command():
    before = sys.stdout, sys.stderr
    cli("list")
    assert (sys.stdout, sys.stderr) == before


def test_what_is_left_on_disk_in_words():
    a, b, c, d, e = (Path(f"{n}.xlsx") for n in "abcde")
    assert on_disk([], []) == "nothing was written"
    assert on_disk([], [a]) == "nothing was written (a.xlsx is as it was)"
    assert on_disk([a], []) == "a.xlsx was written in full"
    assert on_disk([a, b], [c]) == "a.xlsx and b.xlsx were written in full; c.xlsx is as it was"
    assert on_disk([], [a, b, c, d, e]) == ("nothing was written (a.xlsx, b.xlsx, c.xlsx and "
                                            "2 more files are as they were)")


# -- an interrupt says what is on disk ------------------------------------------------------

def interrupting(real, target: Path, after: bool, stop: BaseException | None = None):
    """`real` (os.link or os.replace), raising `stop` (default Ctrl-C's KeyboardInterrupt)
    just before or just after it moves a file to `target`."""
    stop = stop or KeyboardInterrupt()
    def step(source, destination, *args, **kwargs):
        if Path(destination) != target:
            return real(source, destination, *args, **kwargs)
        if not after:
            raise stop
        real(source, destination, *args, **kwargs)
        raise stop
    return step


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".attnsheets-" in p.name)


@pytest.mark.parametrize("after", [False, True], ids=["before-link", "after-link"])
def test_an_interrupt_around_the_move_of_a_new_file_says_what_is_on_disk(tmp_path,
                                                                         monkeypatch, after):
    out = tmp_path / f"new{ESCAPE}.xlsx"
    monkeypatch.setattr(os, "link", interrupting(os.link, out, after))
    ran = cli("build", "attention", "-o", out, *SMALL)
    said = (f"{tmp_path}/new{SHOWN}.xlsx was written in full" if after else
            f"nothing was written ({tmp_path}/new{SHOWN}.xlsx is as it was)")
    assert (ran.returncode, ran.stderr) == (130, f"attnsheets: interrupted; {said}\n")
    assert out.exists() == after and leftovers(tmp_path) == []
    if after:  # the whole workbook
        monkeypatch.undo()
        assert cli("check", out).returncode == 0


@pytest.mark.parametrize("after", [False, True], ids=["before-replace", "after-replace"])
def test_an_interrupt_around_a_forced_replace_says_what_is_on_disk(tmp_path, monkeypatch,
                                                                   after):
    out = tmp_path / "book.xlsx"
    api.build("attention", out, seq_len=2, d_model=2, d_k=2)
    old = out.read_bytes()
    monkeypatch.setattr(os, "replace", interrupting(os.replace, out, after))
    ran = cli("build", "attention", "-o", out, *SMALL, "--seed", "1", "--force")
    said = f"{out} was written in full" if after else f"nothing was written ({out} is as it was)"
    assert (ran.returncode, ran.stderr) == (130, f"attnsheets: interrupted; {said}\n")
    assert (out.read_bytes() == old) != after and leftovers(tmp_path) == []


def test_a_signal_while_a_name_is_claimed_without_hard_links_waits_for_the_move(
        tmp_path, monkeypatch):
    """Without hard links the name is claimed by an empty file, then replaced: a signal
    between the two would leave the empty file; it is acted on once the move is done."""
    out = tmp_path / "book.xlsx"
    real_replace = os.replace

    def no_hard_links(source, destination, *args, **kwargs):
        raise OSError(errno.EPERM, "hard links not supported")

    def signalled_then_replaced(source, destination, *args, **kwargs):
        if Path(destination) == out:
            assert out.stat().st_size == 0  # the claim
            os.kill(os.getpid(), signal.SIGINT)
        return real_replace(source, destination, *args, **kwargs)

    monkeypatch.setattr(os, "link", no_hard_links)
    monkeypatch.setattr(os, "replace", signalled_then_replaced)
    ran = cli("build", "attention", "-o", out, *SMALL)
    assert (ran.returncode, ran.stderr) == (130, f"attnsheets: interrupted; {out} was "
                                                 f"written in full\n")
    monkeypatch.undo()
    assert cli("check", out).returncode == 0 and leftovers(tmp_path) == []


def test_sigterm_after_the_move_says_the_file_was_written(tmp_path, monkeypatch):
    out = tmp_path / "book.xlsx"
    monkeypatch.setattr(os, "link", interrupting(os.link, out, True,
                                                 app.Terminated(signal.SIGTERM)))
    ran = cli("build", "attention", "-o", out, *SMALL)
    assert (ran.returncode, ran.stderr) == (143, f"attnsheets: terminated; {out} was "
                                                 f"written in full\n")


def test_an_interrupt_while_checking_the_written_file_says_it_was_written(tmp_path,
                                                                         monkeypatch):
    out = tmp_path / "book.xlsx"

    def interrupted_check(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "check", interrupted_check)
    ran = cli("build", "attention", "-o", out, *SMALL, "--check")
    assert ran.stdout.startswith(f"wrote {out}")
    assert (ran.returncode, ran.stderr) == (130, f"attnsheets: interrupted; {out} was "
                                                 f"written in full\n")


def test_an_interrupt_while_a_class_moves_in_undoes_it_and_says_so(tmp_path, monkeypatch):
    roster = tmp_path / "roster.csv"
    roster.write_text("id\na1\nb2\n")
    out = tmp_path / "class"
    real_move, moved = classroom.move_into_place, []

    def interrupted_after_two(source, target, force):
        if len(moved) == 2:
            raise KeyboardInterrupt
        real_move(source, target, force)
        moved.append(target)

    monkeypatch.setattr(classroom, "move_into_place", interrupted_after_two)
    ran = cli("class", "attention", "--roster", roster, "--out", out, "--exercise",
              "WEIGHTS", *SMALL)
    assert (ran.returncode, ran.stderr) == (
        130, f"attnsheets: interrupted; nothing was written ({out}/attention_a1.xlsx and "
             f"{out}/attention_a1_key.xlsx are as they were)\n")
    assert [p.name for p in moved] == ["attention_a1.xlsx", "attention_a1_key.xlsx"]
    assert not out.exists()


def test_an_interrupted_demo_names_what_its_workers_wrote(tmp_path, monkeypatch):
    out = tmp_path / "demo"
    names = [name for name, *_ in api.demo_plan(False)]

    def first_then_interrupted(folder, force, with_model=True):
        (folder / names[0]).parent.mkdir(parents=True, exist_ok=True)
        (folder / names[0]).write_bytes(b"written by a worker process")
        raise KeyboardInterrupt
        yield  # a generator, as run_demo is

    monkeypatch.setattr(api, "run_demo", first_then_interrupted)
    ran = cli("demo", "--out", out, "--no-model", "--quiet")
    rest = ", ".join(str(out / name) for name in names[1:4])
    assert (ran.returncode, ran.stderr) == (
        130, f"attnsheets: interrupted; {out / names[0]} was written in full; {rest} and "
             f"{len(names) - 4} more files are as they were\n")


def test_a_real_interrupt_during_a_build_says_nothing_was_written(tmp_path):
    out = tmp_path / "books"
    out.mkdir()
    process, _ = start(["build", "attention", "-o", out / "big.xlsx", "--seq-len", "40",
                        "--d-model", "16", "--d-k", "16"], tmp_path)
    code, err = terminate_once(process, lambda: any(out.glob(".attnsheets-*")),
                               signal.SIGINT)
    assert (code, err) == (130, f"attnsheets: interrupted; nothing was written "
                                f"({out}/big.xlsx is as it was)\n")
    assert list(out.iterdir()) == []


def test_the_record_of_writes_is_dropped_after_each_command(tmp_path):
    cli("build", "attention", "-o", tmp_path / "book.xlsx", *SMALL)
    assert files.writes_since(0.0) == ([], [])


# -- token ids: checked against the vocabulary, naming the flag -------------------------------

def word_tokenizer() -> bytes:
    """A tokenizer.json of three words (ids 0 … 2): it labels rows by their ids."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordPiece
    from tokenizers.pre_tokenizers import Whitespace

    tokenizer = Tokenizer(WordPiece({"the": 0, "cat": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    return tokenizer.to_str().encode()


GPT2_CONFIG = {"model_type": "gpt2", "n_embd": D, "n_head": HEADS, "n_layer": 1,
               "activation_function": "gelu_new", "vocab_size": VOCAB}
MAMBA_CONFIG = {"model_type": "mamba", "hidden_size": D, "num_hidden_layers": 1,
                "layer_norm_epsilon": 1e-5, "use_conv_bias": True, "use_bias": False,
                "hidden_act": "silu", "time_step_rank": MAMBA_RANK}
# kind, weights, config, the word-embedding table
FAMILIES = {"BERT": ("encoder-block", bert_weights, BERT_CONFIG,
                     "embeddings.word_embeddings.weight"),
            "GPT-2": ("decoder-block", gpt2_weights, GPT2_CONFIG, "wte.weight"),
            "LLaMA": ("llama-block", unbiased_llama_weights, LLAMA_CONFIG, "embed_tokens.weight"),
            "Mamba": ("mamba-block", mamba_weights, MAMBA_CONFIG, "embeddings.weight")}


@requires_prlimit
@requires_tokenizers
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("bad", ["-1", "4294967296", str(VOCAB)])
def test_a_token_id_outside_the_vocabulary_names_the_flag_and_the_table(tmp_path, family,
                                                                        bad):
    kind, weights, config, table = FAMILIES[family]
    folder = model_folder(tmp_path / "m", weights(), config, tokenizer=word_tokenizer())
    out = tmp_path / "x.xlsx"
    ran = capped("build", kind, "--checkpoint", folder, "--token-ids", f"1,{bad}",
                      "-o", out)
    assert one_line_error(ran) == (
        f"attnsheets: error: --token-ids: token id {bad} is outside the vocabulary, 0 … "
        f"{VOCAB - 1} (the {VOCAB} rows of tensor {table} in {folder}/model.safetensors)")
    assert not out.exists()


def sentence_folder(folder: Path, max_seq_length: int) -> Path:
    """The NumPy BERT as a sentence-transformers folder: Transformer → Pooling (mean),
    texts cut at `max_seq_length` tokens."""
    model_folder(folder, bert_weights(), BERT_CONFIG, tokenizer=word_tokenizer())
    st = "sentence_transformers.models."
    (folder / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": st + "Transformer"},
         {"idx": 1, "name": "1", "path": "1_Pooling", "type": st + "Pooling"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"embedding_dimension": D, "pooling_mode": "mean"}))
    (folder / "sentence_bert_config.json").write_text(json.dumps(
        {"max_seq_length": max_seq_length, "do_lower_case": False}))
    return folder


@requires_prlimit
@requires_tokenizers
@pytest.mark.parametrize("bad", ["-1", "4294967296"])
def test_the_second_texts_ids_are_checked_naming_token_ids2(tmp_path, bad):
    folder = sentence_folder(tmp_path / "m", 8)
    ran = capped("build", "encoder", "--checkpoint", folder, "--token-ids", "0,1",
                      "--token-ids2", f"1,{bad}", "-o", tmp_path / "x.xlsx")
    assert one_line_error(ran) == (
        f"attnsheets: error: --token-ids2: token id {bad} is outside the vocabulary, 0 … "
        f"{VOCAB - 1} (the {VOCAB} rows of tensor embeddings.word_embeddings.weight in "
        f"{folder}/model.safetensors)")


@requires_tokenizers
def test_the_second_texts_flags_are_named_in_every_refusal(tmp_path):
    folder = sentence_folder(tmp_path / "m", 8)
    base = ["build", "encoder", "--checkpoint", folder, "--token-ids", "0,1", "-o",
            tmp_path / "x.xlsx"]
    assert one_line_error(cli(*base, "--token-ids2", "1,x")) == (
        "attnsheets: error: --token-ids2 must be whole numbers separated by commas, got "
        "'1,x'")
    assert one_line_error(cli(*base, "--text2", " ")) == "attnsheets: error: --text2 is empty"


@requires_tokenizers
def test_a_second_text_without_a_tokenizer_names_the_second_texts_flags(tmp_path):
    folder = sentence_folder(tmp_path / "m", 8)
    (folder / "tokenizer.json").unlink()
    ran = cli("build", "encoder", "--checkpoint", folder, "--token-ids", "0,1", "--text2",
              "the", "-o", tmp_path / "x.xlsx")
    assert one_line_error(ran) == (f"attnsheets: error: {folder}/model.safetensors: no "
                                   f"tokenizer.json beside the weights; give --token-ids2 "
                                   f"instead of --text2")


@requires_tokenizers
@pytest.mark.parametrize("flags, typed", [
    (["--token-ids", "0,1,0"], "--token-ids"),
    (["--text", "the cat the"], "--text"),
    (["--token-ids", "0", "--token-ids2", "0,1,0"], "--token-ids2"),
    (["--token-ids", "0", "--text2", "the cat the"], "--text2"),
])
def test_a_text_longer_than_max_seq_length_names_the_flag_typed(tmp_path, flags, typed):
    folder = sentence_folder(tmp_path / "m", 2)
    ran = cli("build", "encoder", "--checkpoint", folder, *flags, "-o", tmp_path / "x.xlsx")
    line = one_line_error(ran)
    assert line.startswith(f"attnsheets: error: {typed} gives 3 tokens; "), line
    assert line.endswith("(sentence-transformers would cut it)"), line


@requires_tokenizers
@pytest.mark.parametrize("flags, typed", [(["--token-ids", ",".join(["1"] * (POSITIONS + 1))],
                                           "--token-ids"),
                                          (["--text", " ".join(["cat"] * (POSITIONS + 1))],
                                           "--text")])
def test_more_tokens_than_positions_names_the_flag_typed(tmp_path, flags, typed):
    folder = model_folder(tmp_path / "m", bert_weights(), BERT_CONFIG,
                          tokenizer=word_tokenizer())
    ran = cli("build", "encoder-block", "--checkpoint", folder, *flags, "-o",
              tmp_path / "x.xlsx")
    assert one_line_error(ran) == (
        f"attnsheets: error: {typed} gives {POSITIONS + 1} tokens, which need "
        f"{POSITIONS + 1} rows of embeddings.position_embeddings.weight; it has {POSITIONS} "
        f"(in {folder}/model.safetensors)")
