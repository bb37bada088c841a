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


# ------------------------------------------------------------------ the option table tied to the specs
#: the dataclass a dotted request parameter (``columns.label``) is a field of
NESTED = {"columns": "gmp.datasets.dispatch:ColumnChoice"}
#: spec fields every resolution computes
COMPUTED = ("sources", "warnings")


def _load(ref: str):
    import importlib

    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _command(path: str):
    import typer.main

    cmd = typer.main.get_command(app)
    for word in path.split():
        cmd = cmd.commands[word]
    return cmd


def _type_name(type_) -> str:
    """``Optional[int]`` -> ``"int"``, ``List[Path]`` -> ``"Path"``: the name a spec field's annotation holds."""
    import typing

    while typing.get_args(type_):
        type_ = next(a for a in typing.get_args(type_) if a is not type(None))
    return type_.__name__


def request_mismatches(command, request, params) -> list[str]:
    """What does not meet between a command's options (click ``params``) and its :class:`cli._options.Request`:
    an option that is no request parameter, a parameter (or a field of a dotted one, or a spec field) that no
    option gives, a default of the command that is not the library's, an option's type that is not its spec
    field's."""
    import dataclasses
    import inspect

    from cli._options import declaration

    takes: dict = {}
    for ref in request.takes:
        taken = _load(ref)
        if isinstance(taken, tuple):  # the names a resolution takes through **keywords (gmp.specs.TIER_KEYS)
            for name in taken:
                takes.setdefault(name, inspect.Parameter.empty)
            continue
        for p in inspect.signature(taken).parameters.values():
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                takes.setdefault(p.name, p.default)
    spec = {f.name: f for f in dataclasses.fields(request.spec_class())}
    problems, reached = [], set()
    for opt in params:
        if opt.name in request.cli_only:
            continue
        target = request.renamed.get(opt.name, opt.name)
        head, _, leaf = target.partition(".")
        if head not in takes:
            problems.append(f"option {opt.name}: no parameter {head!r} in {', '.join(request.takes)}")
            continue
        reached.update((head, target))
        if leaf and leaf not in {f.name for f in dataclasses.fields(_load(NESTED[head]))}:
            problems.append(f"option {opt.name}: {NESTED[head]} has no field {leaf!r}")
        field = spec.get(head)
        kind = _type_name(declaration(command, opt.name).type)
        if target == opt.name and field is not None and field.type != "Any" and kind not in str(field.type):
            problems.append(f"option {opt.name}: type {kind}, {request.spec} {field.type}")
        default = tuple(opt.default) if isinstance(opt.default, list) else opt.default
        if target != opt.name or opt.required or default is None:
            continue  # renamed (no_plots -> plots), or "not given": resolution decides
        library = takes[head]
        if isinstance(default, str) and isinstance(library, (int, float)) and not isinstance(library, bool):
            default = type(library)(default)  # a number the command takes as text (--staleness 0 or inf)
        if library is not inspect.Parameter.empty and library is not None and library != default:
            problems.append(f"option {opt.name}: default {default!r}, {request.takes[0]} {library!r}")
        if field is not None and field.default is not dataclasses.MISSING and field.default != default:
            problems.append(f"option {opt.name}: default {default!r}, {request.spec} {field.default!r}")
    for name in takes:
        if name not in reached and name not in request.python_only:
            problems.append(f"parameter {name}: no option gives it (or say why in python_only)")
        if name in NESTED and name in reached:
            for f in dataclasses.fields(_load(NESTED[name])):
                if f"{name}.{f.name}" not in reached:
                    problems.append(f"field {name}.{f.name}: no option gives it")
    for name in spec:
        if name not in takes and name not in request.derived and name not in COMPUTED:
            problems.append(f"spec field {name}: neither a parameter nor derived")
    return problems


@pytest.mark.parametrize("command", ["train", "simulate", "data synth", "partition", "report", "compare", "export torchrec",
                                     "data import"])
def test_each_option_is_a_request_parameter_and_each_parameter_an_option(command):
    """The option table and the specs (issue 34): every option of the command is a parameter of the request it
    resolves, every parameter (every spec field) is an option or says why not, and where the command shows a
    default it is the library's (the same request from Python and from the command line)."""
    from cli._options import REQUESTS

    assert request_mismatches(command, REQUESTS[command], _command(command).params) == []


def test_a_parameter_without_an_option_and_a_drifted_default_are_found():
    import dataclasses

    from cli._options import REQUESTS

    compare = REQUESTS["compare"]
    params = [p for p in _command("compare").params if p.name != "methods"]
    assert request_mismatches("compare", compare, params) == ["parameter methods: no option gives it (or say why in "
                                                   "python_only)"]
    params = _command("compare").params
    isolate = next(p for p in params if p.name == "isolate")
    old_default, isolate.default = isolate.default, False  # the API's default before issue 34's item 6
    try:
        assert request_mismatches("compare", compare, params) == ["option isolate: default False, "
                                                                  "gmp.specs:CompareSpec True"]
    finally:
        isolate.default = old_default
    no_field = dataclasses.replace(compare, spec="gmp.specs:ReportSpec")  # a spec with fields no option gives
    assert "spec field format: neither a parameter nor derived" in request_mismatches("compare", no_field, params)


def test_an_option_of_another_type_than_its_spec_field_is_found():
    import dataclasses

    from cli._options import REQUESTS, Request

    @dataclasses.dataclass(frozen=True)
    class Seeded:
        seed: str = "0"  # a string where gmp compare --seed takes an int

    class OtherSpec(Request):
        def spec_class(self):
            return Seeded

    other = OtherSpec(**{f.name: getattr(REQUESTS["compare"], f.name) for f in dataclasses.fields(Request)})
    assert "option seed: type int, gmp.specs:CompareSpec str" in request_mismatches("compare", other,
                                                                                    _command("compare").params)


def test_a_misspelt_field_of_the_option_table_is_refused(tmp_path):
    """A typo in cli/options.json (``defualt``) would leave a default out silently; loading the table refuses it."""
    import json

    from cli._options import TABLE, load_table

    table = json.loads(TABLE.read_text(encoding="utf-8"))
    table["options"]["seed"]["defualt"] = 1
    (tmp_path / "o.json").write_text(json.dumps(table))
    with pytest.raises(ValueError, match=r"options seed: unknown field\(s\) \['defualt'\]"):
        load_table(tmp_path / "o.json")
    shared, commands = load_table()  # the table itself loads, with every command
    assert {"partition", "report", "compare", "export torchrec", "data import", "simulate", "data synth"} <= \
        set(commands) and shared["seed"].default == 0
