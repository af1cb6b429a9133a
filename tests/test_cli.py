"""The command line as a user runs it: its exit code and what it prints (in-process through
`main(argv)`, and as a new process where the process itself matters)."""

import json
import os
import pty
import re
import shutil
import sys
import zipfile

import openpyxl
import pytest
from helpers.books import build
from helpers.cli import BUILD_ATTENTION, cli, one_line_error, refused_writing_nothing, run_cli

import workbook_builder.api
import workbook_builder.demo
from workbook_builder.sheet.names import find_name


def test_list_shows_every_kind_with_a_description():
    result = cli("list")
    assert result.returncode == 0
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert {"attention", "multihead"} <= set(names)
    assert all(len(line.split()) > 2 for line in result.stdout.splitlines())


def test_build_then_check_round_trip_with_tokens_and_json_inputs(tmp_path):
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"X": [[1, 0], [0, 1], [1, 1]],
                                  "W_Q": [[1, 0], [0, 1]]}))
    out = tmp_path / "wo.xlsx"
    result = run_cli("build", "attention", "-o", out, "--inputs", inputs, "--tokens",
                     "我,爱,AI", "--causal", "--layout", "blocks")
    assert result.returncode == 0, result.stderr
    assert "seq_len=3, d_model=2, d_k=2" in result.stdout  # sizes inferred from the inputs
    wb = openpyxl.load_workbook(out)
    ws = wb["Attention"]
    labels = {c.value for row in ws.iter_rows() for c in row}
    assert {"我", "爱", "AI"} <= labels
    checked = run_cli("check", out, "--json")
    assert checked.returncode == 0, checked.stdout
    report = json.loads(checked.stdout)
    assert report["passed"] and report["params"]["causal"] is True
    assert {s["name"] for s in report["steps"]} >= {"Q", "SCORES", "MASK", "WEIGHTS", "OUTPUT"}


def test_csv_input_and_seed(tmp_path):
    (tmp_path / "x.csv").write_text("0.5,1\n2,-1\n")
    out = tmp_path / "a.xlsx"
    result = cli("build", "multihead", "-o", out, "--inputs", f"X={tmp_path / 'x.csv'}",
                 "--heads", "1", "--seed", "3")
    assert result.returncode == 0, result.stderr
    assert cli("check", out).returncode == 0


def test_check_reports_a_mismatch_with_exit_1_and_names_the_step(tmp_path):
    path = build(tmp_path, "attention", {"seq_len": 3, "d_model": 2, "d_k": 2})
    wb = openpyxl.load_workbook(path)
    where = find_name(wb, "WEIGHTS", path)
    cell = wb[where.sheet].cell(where.top + 2, where.left + 1)
    cell.value = "=0.5"
    wb.save(path)
    result = cli("check", path)
    assert result.returncode == 1
    assert "FAILED: 2 of 10 steps; first: WEIGHTS" in result.stdout  # WEIGHTS and OUTPUT
    assert f"Attention!{cell.coordinate}" in result.stdout


@pytest.mark.parametrize("args,needle", [
    (["build", "nosuchkind", "-o", "{tmp}/a.xlsx"], "invalid choice: 'nosuchkind'"),
    ([*BUILD_ATTENTION, "--seq-len", "0"], "--seq-len must be"),
    ([*BUILD_ATTENTION, "--d-k", "-2"], "--d-k must be"),
    ([*BUILD_ATTENTION, "--seq-len", "x"], "invalid int value"),
    (["build", "multihead", "-o", "{tmp}/a.xlsx", "--d-model", "5", "--heads", "2"],
     "--heads 2 does not divide --d-model 5"),
    (["build", "multihead", "-o", "{tmp}/a.xlsx", "--heads", "4", "--kv-heads", "3"],
     "--kv-heads 3 does not divide --heads 4"),
    ([*BUILD_ATTENTION, "--inputs", "{tmp}/bad_shape.json"],
     "inputs disagree on d_model: X gives 2, W_Q gives 3"),
    ([*BUILD_ATTENTION, "--inputs", "{tmp}/not.json"],
     "not a readable JSON file"),
    ([*BUILD_ATTENTION, "--inputs", "{tmp}/missing.json"],
     "no such inputs file"),
    ([*BUILD_ATTENTION, "--inputs", "{tmp}/text.json"],
     "not a number"),
    ([*BUILD_ATTENTION, "--tokens", "a,b", "--seq-len", "4"],
     "--tokens gives 2 labels but the sequence has 4"),
    (["build", "attention", "-o", "{tmp}/nofolder/a.xlsx"], "no such folder"),
    (["build", "attention", "-o", "{tmp}/a.csv"], "must end in .xlsx"),
    (["check", "{tmp}/missing.xlsx"], "no such file"),
    (["check", "{tmp}/not.json"], "is not an .xlsx workbook"),
    (["check", "{tmp}/plain.xlsx"], "not an attnsheets workbook"),
    (["check", "{tmp}/nameless.xlsx"], "lacks the defined name"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, needle):
    (tmp_path / "bad_shape.json").write_text(json.dumps({"X": [[1, 2]] * 2,
                                                         "W_Q": [[1, 2, 3]] * 3}))
    (tmp_path / "not.json").write_text("{not json")
    (tmp_path / "text.json").write_text(json.dumps({"X": [["a", 1]]}))
    openpyxl.Workbook().save(tmp_path / "plain.xlsx")
    nameless = build(tmp_path, "attention", {"seq_len": 2, "d_model": 2, "d_k": 2},
                     name="nameless.xlsx")
    wb = openpyxl.load_workbook(nameless)
    del wb.defined_names["SCALED"]
    wb.save(nameless)
    assert needle in refused_writing_nothing(tmp_path, args)


def test_existing_output_is_kept_unless_force(tmp_path):
    out = tmp_path / "a.xlsx"
    out.write_bytes(b"my own notes")
    result = cli("build", "attention", "-o", out)
    assert "already exists; pass --force" in one_line_error(result)
    assert out.read_bytes() == b"my own notes"
    assert cli("build", "attention", "-o", out, "--force").returncode == 0
    assert zipfile.is_zipfile(out)


def test_python_dash_m_and_help_work():
    result = run_cli("build", "multihead", "--help")
    assert result.returncode == 0 and "--kv-heads" in result.stdout


def test_demo_builds_and_checks_every_kind_in_both_layouts(demo):
    assert "all checks pass" in demo.stdout
    kinds_built = {b.name.rsplit("_", 1)[0] for b in demo.books}
    for name, kind in workbook_builder.demo.load_kinds().items():
        for stem, _ in kind.demo_cases:
            assert stem in kinds_built, name
    assert len(demo.books) == len(workbook_builder.demo.demo_plan(with_model=False))
    assert all(f"{b}" in demo.stdout for b in demo.books)


def test_demo_reruns_without_losing_edits(demo, tmp_path, monkeypatch):
    out = tmp_path / "demo"
    shutil.copytree(demo.out, out)
    plan = workbook_builder.demo.demo_plan()[:2]  # the rule, on two of the workbooks
    monkeypatch.setattr(workbook_builder.demo, "demo_plan", lambda with_model=True: plan)
    monkeypatch.setattr(workbook_builder.api, "demo_plan", lambda with_model=True: plan)
    # --no-model: the real-BERT workbook (when its package is installed) takes minutes
    assert cli("demo", "--out", out, "--no-model").returncode == 0  # unchanged: rebuilt
    edited = out / plan[0][0]
    wb = openpyxl.load_workbook(edited)
    wb.active["A2"] = "my lesson notes"
    wb.save(edited)
    refused = cli("demo", "--out", out, "--no-model")
    assert edited.name in one_line_error(refused)
    assert openpyxl.load_workbook(edited).active["A2"].value == "my lesson notes"
    assert cli("demo", "--out", out, "--force", "--no-model").returncode == 0


def _run_on_terminal(*args: str) -> bytes:
    """The CLI with a pseudo-terminal as its stdout and stderr, as a user sees it."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: becomes the CLI
        os.execv(sys.executable, [sys.executable, "-m", "workbook_builder", *args])
    chunks = []
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    except OSError:  # the terminal closes when the child exits
        pass
    os.waitpid(pid, 0)
    return b"".join(chunks)


def test_progress_shows_on_a_terminal_only_and_not_with_quiet(tmp_path):
    path = build(tmp_path, "attention", {"seq_len": 2, "d_model": 2, "d_k": 2})
    on_terminal = _run_on_terminal("check", str(path))
    assert b"evaluating book.xlsx with formulas" in on_terminal
    assert b"all 10 steps pass" in on_terminal
    assert b"evaluating" not in _run_on_terminal("check", str(path), "--quiet")
    piped = run_cli("check", path)
    assert piped.returncode == 0 and piped.stderr == ""


def test_build_with_check_reports_as_check_does(tmp_path, monkeypatch):
    """`build --check` writes the file, then prints what `check FILE` prints of it; a sheet
    whose numbers differ from the reference fails it with exit 1 (`check`'s code)."""
    path = tmp_path / "a.xlsx"
    built = cli("build", "attention", "-o", path, "--seq-len", "3", "--check")
    assert built.returncode == 0, built.stderr
    wrote, sources, report = built.stdout.split("\n", 2)
    assert wrote.startswith(f"wrote {path}")
    assert sources.startswith("parameters: seq_len 3 by flag, ")

    def untimed(text):  # the last line ends with the seconds the check took
        return re.sub(r" \(\d+\.\d s\)$", "", text.rstrip("\n"))

    assert untimed(report) == untimed(cli("check", path).stdout)
    assert "all " in report and " steps pass" in report

    again = cli("build", "attention", "-o", path, "--check")  # refused before any check
    assert "already exists" in one_line_error(again) and again.stdout == ""

    real = workbook_builder.api.check

    def one_step_off(*args, **kwargs):  # as if the sheet's numbers had gone wrong
        report = real(*args, **kwargs)
        report.steps[0].max_abs_error, report.steps[0].passed = 1.0, False
        return report

    monkeypatch.setattr(workbook_builder.api, "check", one_step_off)
    failed = cli("build", "attention", "-o", tmp_path / "b.xlsx", "--check")
    assert failed.returncode == 1 and "FAIL" in failed.stdout.upper()


# -- help texts name only flags that exist; a near miss is named ---------------------------

def _help(*command) -> str:
    """`attnsheets COMMAND --help`, its flags that argparse wrapped at a hyphen joined."""
    shown = cli(*command, "--help")
    assert shown.returncode == 0, shown.stderr
    return re.sub(r"(--[a-z0-9-]*-)\n\s*", r"\1", shown.stdout)


def _flags_defined(text: str) -> set[str]:
    """The long flags a help text's option lines define."""
    return set(re.findall(r"^\s+(?:-\w[^,\n]*, )?(--[a-z0-9][a-z0-9-]*)", text, re.M))


def _flags_named(text: str) -> set[str]:
    """Every long flag a help text names, but another program's (`ssconvert --recalc`)."""
    return set(re.findall(r"(?<![\w-])(?<!ssconvert )(--[a-z0-9][a-z0-9-]*)", text))


def test_every_help_text_names_only_flags_that_exist():
    kinds = workbook_builder.api.kinds()
    defined = {kind: _flags_defined(_help("build", kind)) for kind in kinds}
    for kind in kinds:
        assert _flags_named(_help("build", kind)) - defined[kind] == set(), kind
    for command in ("list", "check", "pdf", "demo", "reproduce", "grade"):
        text = _help(command)
        assert _flags_named(text) - _flags_defined(text) == set(), command
    for command in ("build", "class"):  # the list of kinds: each summary's flags its kind's
        text = _help(command)
        for kind, summary in re.findall(r"^    ([a-z0-9-]+)\s+(.*(?:\n {10,}.*)*)", text,
                                        re.M):
            if kind in defined:
                assert _flags_named(summary) <= defined[kind], (command, kind)


@pytest.mark.parametrize("args,says", [
    (["build", "attention", "--seq-length", "3"], "unrecognized arguments: --seq-length 3; "
                                                  "did you mean --seq-len?"),
    (["build", "attention", "--seqlen=3"], "did you mean --seq-len?"),
    (["build", "atention"], "invalid choice: 'atention'"),
    (["buld", "attention"], "; did you mean build?"),
])
def test_a_near_miss_is_named(tmp_path, args, says):
    line = one_line_error(cli(*args, "-o", tmp_path / "a.xlsx"))
    assert says in line, line
    if "atention" in args:
        assert "; did you mean attention?" in line


def test_a_checkpoint_given_to_a_kind_that_takes_none_names_the_kinds_that_do(tmp_path):
    line = one_line_error(cli("build", "attention", "--checkpoint", tmp_path, "-o",
                              tmp_path / "a.xlsx"))
    kinds = workbook_builder.api.CHECKPOINT_KINDS
    assert f"unrecognized arguments: --checkpoint {tmp_path}; --checkpoint is for " \
           f"{', '.join(kinds)} (see --help)" in line and "encoder" in kinds, line


def test_a_far_miss_names_nothing(tmp_path):
    line = one_line_error(cli("build", "attention", "--zzz", "3", "-o", tmp_path / "a.xlsx"))
    assert "unrecognized arguments: --zzz 3" in line and "did you mean" not in line


def test_a_zip_that_is_no_model_is_named_before_any_text_is_asked_for(tmp_path):
    archive = tmp_path / "notes.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("notes.txt", "not a model")
    line = one_line_error(cli("build", "encoder", "--checkpoint", archive, "-o",
                              tmp_path / "e.xlsx"))
    assert f"{archive}: the zip holds no model.safetensors or pytorch_model.bin" in line, line
