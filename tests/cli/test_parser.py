"""The parser a process builds for its one command is the whole parser's part for that command."""

from __future__ import annotations

import argparse
import importlib

import pytest

from llmgw.cli.main import COMMANDS, Parser, admin_options, build_parser


def _choices(parser: argparse.ArgumentParser) -> list[str]:
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(subparsers.choices)


def test_the_table_names_every_command_in_the_order_help_lists_them():
    assert _choices(build_parser()) == list(COMMANDS)


@pytest.mark.parametrize("module_name", sorted({module for module, _ in COMMANDS.values()}))
def test_each_module_registers_exactly_the_commands_the_table_gives_it(module_name):
    takes_common = {common for module, common in COMMANDS.values() if module == module_name}
    assert len(takes_common) == 1, f"{module_name} is said both to take and not to take the admin options"
    parser = Parser(prog="llmgw")
    commands = parser.add_subparsers(dest="command", parser_class=Parser)
    module = importlib.import_module(f"llmgw.cli.{module_name}")
    if takes_common.pop():
        module.register(commands, admin_options())
    else:
        module.register(commands)
    assert list(commands.choices) == [name for name, (module, _) in COMMANDS.items() if module == module_name]


@pytest.mark.parametrize("argv", [
    ["server", "--config", "/etc/llmgw/server.yaml", "--name", "cp1"],
    ["agent", "--config", "/etc/llmgw/agent.yaml"],
    ["sim-engine", "--port", "0", "--model", "sim", "--guard", "stab=Violent"],
    ["ctl", "status", "--json"],
    ["keys", "list", "--admin", "127.0.0.1:9090"],
    ["node", "add", "--ssh", "root@10.0.0.5"],
])
def test_a_commands_own_parser_reads_its_arguments_as_the_whole_parser_does(argv):
    def parsed(parser: Parser) -> dict:
        values = vars(parser.parse_args(argv))
        values.pop("run", None)  # the same function either way; compared by name below
        return values

    whole, own = build_parser(), build_parser(argv[0])
    assert _choices(own) == [name for name, (module, _) in COMMANDS.items() if module == COMMANDS[argv[0]][0]]
    assert parsed(own) == parsed(whole)
    assert own.parse_args(argv).run.__qualname__ == whole.parse_args(argv).run.__qualname__


def test_a_name_that_is_no_command_gets_every_command_so_the_error_can_list_them(capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser("sevrer").parse_args(["sevrer"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert "invalid choice: 'sevrer'" in said
    assert all(f"'{name}'" in said for name in COMMANDS)
