"""The hami-sim dispatcher: every subcommand is listed and unknown ones are refused."""
from hami_sim import cli


def test_usage_lists_every_command():
    text = cli.usage()
    for name in cli.COMMANDS:
        assert f"  {name}" in text


def test_unknown_command_is_refused(capsys):
    assert cli.main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err


def test_no_arguments_prints_usage_and_fails(capsys):
    assert cli.main([]) == 2
    assert "usage: hami-sim" in capsys.readouterr().out
