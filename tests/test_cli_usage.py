"""The ``pylibbpf`` command line itself: help, usage errors, option ranges and combinations.

Every case runs ``python -m pylibbpf`` in a subprocess. A usage error is one
line on stderr, exit status 2, naming the option and pointing at the
subcommand's own ``--help``; nothing is loaded before it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMAND = [sys.executable, "-m", "pylibbpf"]
#: Every subcommand, with the arguments it needs to get past its positionals.
SUBCOMMANDS = {"trace": ["exec"], "inspect": ["x.bpf.o"], "features": [], "runqlat": [], "build": ["x.bpf.c"],
               "profile": []}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*COMMAND, *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def assert_usage_error(done: subprocess.CompletedProcess[str], command: str, *fragments: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"pylibbpf {command}: error: "), lines[0]
    assert lines[0].endswith(f"(see `pylibbpf {command} --help`)"), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_help_lists_every_subcommand_with_a_description() -> None:
    done = run("--help")
    assert done.returncode == 0, done.stderr
    listed = {}
    for line in done.stdout.splitlines():
        words = line.split(maxsplit=1)
        if line.startswith("    ") and words and words[0] in SUBCOMMANDS:
            listed[words[0]] = words[1] if len(words) > 1 else ""
    assert set(listed) == set(SUBCOMMANDS), done.stdout
    assert all(len(text) > 10 for text in listed.values()), listed


def test_profile_help_names_the_bcc_folded_format() -> None:
    done = run("profile", "--help")
    assert done.returncode == 0
    assert "bcc's `profile -fa`" in " ".join(done.stdout.split()), done.stdout


@pytest.mark.parametrize("command", sorted(SUBCOMMANDS))
def test_usage_error_points_to_the_subcommands_help(command: str) -> None:
    assert_usage_error(run(command, *SUBCOMMANDS[command], "--no-such-option"), command, "--no-such-option")


def test_top_level_usage_error_points_to_the_top_level_help() -> None:
    done = run("--no-such-option")
    assert done.returncode == 2
    assert done.stderr.startswith("pylibbpf: error: ") and done.stderr.endswith("(see `pylibbpf --help`)\n")


# Out-of-range values: refused by argparse, before anything is loaded.
OUT_OF_RANGE = [
    ("trace", ["exec", "--pid", "99999999999"], "--pid: must be <= 4194304"),
    ("trace", ["exec", "--pid", "0"], "--pid: must be > 0"),
    ("trace", ["exec", "--max-pending", str(10**14)], "--max-pending: must be <= 2147483647"),
    ("trace", ["exec", "--duration", "inf"], "--duration: must be a finite number"),
    ("trace", ["exec", "--duration", "nan"], "--duration: must be > 0"),
    ("trace", ["exec", "--sample", "nan"], "--sample: must be in (0, 1]"),
    ("trace", ["exec", "--pid", "1x"], "--pid: must be an integer"),
    ("runqlat", ["--pid", "99999999999"], "--pid: must be <= 4194304"),
    ("runqlat", ["--count", str(10**14), "--interval", "1"], "--count: must be <= 2147483647"),
    ("runqlat", ["--interval", "inf"], "--interval: must be a finite number"),
    ("runqlat", ["--duration", "-1"], "--duration: must be > 0"),
    ("profile", ["--pid", "99999999999"], "--pid: must be <= 4194304"),
    ("profile", ["--cpu", "-1"], "--cpu: must be >= 0"),
    ("profile", ["--cpu", str(10**20)], "--cpu: must be <= 2147483647"),
    ("profile", ["--frequency", str(10**20)], "--frequency: must be <= 2147483647"),
    ("profile", ["--top", str(10**20)], "--top: must be <= 2147483647"),
    ("profile", ["--duration", "inf"], "--duration: must be a finite number"),
]


@pytest.mark.parametrize(("command", "args", "message"), OUT_OF_RANGE,
                         ids=[f"{c} {' '.join(a)}" for c, a, _ in OUT_OF_RANGE])
def test_out_of_range_values_are_usage_errors(command: str, args: list[str], message: str) -> None:
    assert_usage_error(run(command, *args), command, message)


# Combinations bcc's tools refuse (or cannot express), and the ones argparse cannot check alone.
REFUSED = [
    # bcc's `runqlat [interval [count]]`: a count needs an interval
    ("runqlat", ["--count", "3"], "--count counts intervals: give --interval"),
    ("runqlat", ["--count", "3", "--duration", "1"], "--count counts intervals"),
    # bcc's profile: -U and -K exclude each other; one output format
    ("profile", ["-K", "-U"], "not allowed with argument -K/--kernel-only"),
    ("profile", ["--folded", "--json"], "not allowed with argument --folded"),
    ("trace", ["exec", "--ordered", "--sample", "0.5"], "--ordered reads perf buffers"),
    ("trace", ["exec", "--ordered", "--max-pending", "5"], "--ordered reads perf buffers"),
    ("trace", ["exec", "--json", "--format", "table"], "contradict each other"),
    ("trace", ["exec", "--format", "arrow"], "give -o FILE"),
    ("trace", ["exec", "-o", "out.arrow"], "-o/--output is for --format arrow"),
]


@pytest.mark.parametrize(("command", "args", "message"), REFUSED, ids=[f"{c} {' '.join(a)}" for c, a, _ in REFUSED])
def test_refused_combinations(command: str, args: list[str], message: str) -> None:
    assert_usage_error(run(command, *args), command, message)
