"""``pylibbpf.features`` and ``pylibbpf features`` without privileges: the kernel refuses the probes
(EPERM), so there is no answer to give. The probe functions raise BPFError(EPERM) and the command
says so in one line, instead of answering False (program and map types) or True (helpers).

Each case runs in a subprocess as root without any capability (setpriv, as tests/test_cli.py's
``without_privileges``) and, for the calls, as the user nobody too.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys

import pytest
from test_cli import without_privileges

from pylibbpf import BPFError, features

#: Each call prints the errno of the BPFError it raised, or its answer when it raised nothing.
CALLS = {
    "program_type(tracepoint)": "features.program_type('tracepoint')",
    "program_type(socket_filter)": "features.program_type('socket_filter')",
    "program_type(kprobe)": "features.program_type('kprobe')",
    "map_type(hash)": "features.map_type('hash')",
    "map_type(stack_trace)": "features.map_type('stack_trace')",
    "helper(tracepoint, get_current_pid_tgid)": "features.helper('tracepoint', 'get_current_pid_tgid')",
    "helper(socket_filter, override_return)": "features.helper('socket_filter', 'override_return')",
    "helper(xdp, get_prandom_u32)": "features.helper('xdp', 'get_prandom_u32')",
    "report()": "features.report()",
}
SCRIPT = """
import json, sys
from pylibbpf import BPFError, features
out = {}
for name, call in json.loads(sys.argv[1]).items():
    try:
        out[name] = repr(eval(call))
    except BPFError as e:
        out[name] = f"BPFError {e.errno}"
print(json.dumps(out))
"""
#: Runs the rest as the user nobody (no capability either).
AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all")


@pytest.mark.parametrize("prefix", [without_privileges(), AS_NOBODY], ids=["no capability", "nobody"])
def test_probes_without_privileges_raise_eperm(bpf_privileged: None, prefix: tuple[str, ...]) -> None:
    done = subprocess.run([*prefix, sys.executable, "-c", SCRIPT, json.dumps(CALLS)], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    assert answers == {name: f"BPFError {errno.EPERM}" for name in CALLS}


def test_probes_with_privileges_answer(bpf_privileged: None) -> None:
    """The same calls, privileged: answers, and the helper probe says no for a type the kernel lacks."""
    assert features.program_type("tracepoint") and features.map_type("hash")
    assert features.helper("tracepoint", "get_current_pid_tgid")
    assert not features.helper("socket_filter", "override_return")
    report = features.report()
    assert report["program_type(tracepoint)"] and all(isinstance(v, bool) for v in report.values())


def test_unknown_program_type_number_has_no_helpers(bpf_privileged: None) -> None:
    """libbpf answers "assume supported" for a helper of a program type the kernel does not have;
    the type is probed first."""
    with pytest.raises(BPFError) as e:
        features.program_type(10_000)
    assert e.value.errno == errno.EOPNOTSUPP  # libbpf's own answer: a type it does not know
    assert features.program_type("unspec") is False


@pytest.mark.parametrize("prefix", [without_privileges(), AS_NOBODY], ids=["no capability", "nobody"])
@pytest.mark.parametrize("args", [[], ["--json"]], ids=["table", "json"])
def test_features_command_without_privileges_is_one_line(bpf_privileged: None, prefix: tuple[str, ...],
                                                         args: list[str]) -> None:
    done = subprocess.run([*prefix, sys.executable, "-m", "pylibbpf", "features", *args], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("pylibbpf features: loading BPF programs needs root or CAP_BPF"), done.stderr
    assert "Operation not permitted" in done.stderr
