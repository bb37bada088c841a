"""Library errors name parameters, the CLI prints flags (issue 34): ``cli/_flags.py``'s explicit table.

The library writes a parameter between backticks (```max_bad_lines` 0``, ```overwrite=True```); a Python
caller reads its parameter, and every command prints the flag the person typed, word for word what it
printed when the library wrote the flag itself.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli._flags import FLAGS, flag_of, to_flags
from cli.main import app
from gmp.datasets.streaming import CommonOptions
from gmp.errors import ImportDataError

runner = CliRunner()


@pytest.mark.parametrize("library,cli", [
    ("more than `max_bad_lines` 0: x; fix the input or pass `max_bad_lines` N to skip up to N malformed lines.",
     "more than --max-bad-lines 0: x; fix the input or pass --max-bad-lines N to skip up to N malformed lines."),
    ("`out` o already exists; choose another `out` or pass `overwrite=True`.",
     "--out o already exists; choose another --out or pass --overwrite."),
    ("a column is named in more than one of `label`/`categorical`/`multi`/`dense`; give each one role.",
     "a column is named in more than one of --label/--cat/--multi/--dense; give each one role."),
    ("`resume=True`: no checkpoint in c; run without `resume=True` first.",
     "--resume: no checkpoint in c; run without --resume first."),
    ("`hash_sizes` names unknown field(s) ['C99']", "--hash names unknown field(s) ['C99']"),
    # not parameters: a name missing from the table, reST literals, a value in quotes stay as they are
    ("column `nope` and ``literal`` and 'label'", "column `nope` and ``literal`` and 'label'"),
])
def test_to_flags_writes_each_parameter_as_its_flag(library, cli):
    assert to_flags(library) == cli


def test_every_flag_of_the_table_is_a_flag_and_flag_of_uses_it():
    assert all(v.startswith("--") and " " not in v for v in FLAGS.values())
    assert flag_of("categorical") == "--cat" and flag_of("hash_sizes") == "--hash"
    assert flag_of("batch_size") == "--batch-size" and flag_of("on_demand") == "--on-demand/--no-on-demand"


def test_the_library_names_the_parameter():
    with pytest.raises(ImportDataError, match=r"^`min_count` must be >= 1, got 0\.$"):
        CommonOptions(min_count=0)


def test_the_cli_prints_the_flag_for_the_same_refusal(tmp_path):
    """The refusal above through ``gmp data import``: the line the person reads names --min-count, as before."""
    src = tmp_path / "a.csv"
    src.write_text("label,c\n1,x\n0,y\n")
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--label", "label", "--min-count", "0",
                              "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == "error: --min-count must be >= 1, got 0."


def test_the_cli_prints_flags_for_a_message_with_several(tmp_path):
    """`out` and `overwrite=True` in one message (gmp/_io.py), through ``gmp data import``."""
    src, out = tmp_path / "a.csv", tmp_path / "o"
    src.write_text("label,c\n1,x\n0,y\n")
    out.mkdir()
    (out / "keep.txt").write_text("x")
    res = runner.invoke(app, ["data", "import", "csv", str(src), "--label", "label", "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (f"error: --out {out} already exists and is not empty; choose another --out or "
                                  f"pass --overwrite.")


def test_the_option_table_spells_each_flag_as_the_flag_map_does():
    """cli/_options.py declares the flags the commands take, cli/_flags.py the flags messages name: a
    parameter in both must get one flag, or a message would tell the person to type a flag that is not there."""
    from cli._options import OPTIONS, VARIANTS
    from cli._flags import SPECIAL

    declared = [("", n, d) for n, d in OPTIONS.items()] + [(c, n, d) for c, own in VARIANTS.items()
                                                            for n, d in own.items()]
    checked = 0
    for command, name, decl in declared:
        if decl.decls and (name in FLAGS or name in SPECIAL):
            # a boolean's pair (--split-hour/--no-split-hour): the flag map names the positive one
            assert flag_of(name).split("/")[0] == decl.decls[0].split("/")[0], (command, name)
            checked += 1
    assert checked >= 60  # the table is in use (every command's flags, most of them in FLAGS)


def test_a_command_takes_its_declarations_and_its_own_variants():
    import typer.main

    commands = typer.main.get_command(app).commands
    train = {p.name: p for p in commands["train"].params}
    simulate = {p.name: p for p in commands["simulate"].params}
    synth = {p.name: p for p in commands["data"].commands["synth"].params}
    # the shared declaration: one flag, one default in both commands
    assert train["cache_rows"].opts == simulate["cache_rows"].opts == ["--cache-rows"]
    assert train["batch_size"].default is None and simulate["batch_size"].default is None
    # simulate's own default (Herald's paper setting), train's the shared one
    assert (train["schedule"].default, simulate["schedule"].default) == ("static", "herald")
    assert synth["out"].required and synth["out"].opts == ["--out", "-o"]
    assert synth["continue_from"].opts == ["--continue"] and synth["chunk_samples"].default == 1 << 18
