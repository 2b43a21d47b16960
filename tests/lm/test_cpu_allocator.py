"""The allocator setting the CLI makes before decoding (cpu_allocator)."""

import platform

from decoding_adapters.lm import cpu_allocator


def test_keep_freed_memory_is_in_force_on_glibc_and_idempotent(monkeypatch):
    monkeypatch.setattr(cpu_allocator, "_applied", None)
    first = cpu_allocator.keep_freed_memory()
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert first is True
    assert cpu_allocator.keep_freed_memory() is first


def test_without_mallopt_nothing_is_tuned(monkeypatch):
    monkeypatch.setattr(cpu_allocator, "_applied", None)
    monkeypatch.setattr(cpu_allocator.ctypes.util, "find_library", lambda name: None)
    assert cpu_allocator.keep_freed_memory() is False


def test_the_cli_sets_it_before_running_a_command(monkeypatch, capsys, tiny_model_dir):
    from decoding_adapters import cli

    calls = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: calls.append(1) or True)
    assert cli.main(["reproduce", "--plan", "--model", str(tiny_model_dir)]) == 0  # prints the time estimate
    assert calls == [1] and "total" in capsys.readouterr().out
