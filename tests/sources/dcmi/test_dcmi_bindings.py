"""The ctypes layouts and signatures against the real DCMI header: gcc compiles the header (MindCluster's copy,
tests/fixtures/dcmi/dcmi_interface_api.h) into a program that prints every struct's sizeof and every field's
offsetof and sizeof; the bindings must agree on each. The header is the truth."""

import ctypes
import os
import re
import shutil
import subprocess

import pytest

from npumon.sources.dcmi import bindings, structs
from paths import FIXTURES, REPO

HEADER = os.path.join(FIXTURES, "dcmi", "dcmi_interface_api.h")
# The driver-header declarations the fixture header lacks (the HCCS status and lane structs among them), as the
# simulated library declares them
EXTRAS = os.path.join(REPO, "npumon", "sim", "dcmi", "dcmi_driver_extras.h")
pytestmark = pytest.mark.integration


def _c_program() -> str:
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "dcmi_interface_api.h"',
             '#include "dcmi_driver_extras.h"', 'int main(void) {']
    for name, cls in structs.STRUCTS.items():
        ctype = ("union " if name in structs.UNIONS else "struct ") + name
        lines.append('printf("%s %zu\\n", "{}", sizeof({}));'.format(name, ctype))
        for field, _ in cls._fields_:
            lines.append('printf("%s.%s %zu %zu\\n", "{0}", "{1}", offsetof({2}, {1}), sizeof((({2} *)0)->{1}));'
                         .format(name, field, ctype))
    lines += ["return 0;", "}"]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed (.ci/run installs it)")
    work = tmp_path_factory.mktemp("dcmi-layout")
    shutil.copy(HEADER, str(work / "dcmi_interface_api.h"))
    shutil.copy(EXTRAS, str(work / "dcmi_driver_extras.h"))
    (work / "layout.c").write_text(_c_program())
    # -w: the cgo copy declares its functions static and never defines them
    subprocess.run(["gcc", "-w", "-o", str(work / "layout"), str(work / "layout.c")], check=True, timeout=120)
    out = subprocess.run([str(work / "layout")], check=True, timeout=30, capture_output=True, text=True).stdout
    sizes, fields = {}, {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            sizes[parts[0]] = int(parts[1])
        else:
            fields[parts[0]] = (int(parts[1]), int(parts[2]))
    return sizes, fields


def test_every_struct_of_the_header_is_bound():
    text = open(HEADER).read()
    declared = set(re.findall(r"^\s*(?:typedef\s+)?(?:struct|union)\s+(dcmi_\w+)\s*$", text, re.MULTILINE))
    assert declared, "the header's structs could not be listed"
    assert declared - set(structs.STRUCTS) == set()


def test_struct_sizes_match_the_compiled_header(c_layout):
    sizes, _ = c_layout
    mismatched = {name: (ctypes.sizeof(cls), sizes[name]) for name, cls in structs.STRUCTS.items()
                  if ctypes.sizeof(cls) != sizes[name]}
    assert mismatched == {}
    # the sizes the reference names: the 9-field ECC struct, memory info 112 on LP64 (its comment says 96)
    assert sizes["dcmi_ecc_info"] == 36 and sizes["dcmi_get_memory_info_stru"] == 112
    assert sizes["dcmi_chip_info_v2"] == 132 and sizes["dcmi_pcie_info_all"] == 64


def test_field_offsets_and_sizes_match_the_compiled_header(c_layout):
    _, fields = c_layout
    mismatched = {}
    for name, cls in structs.STRUCTS.items():
        for field, ftype in cls._fields_:
            ours = (getattr(cls, field).offset, ctypes.sizeof(ftype))
            if ours != fields["{}.{}".format(name, field)]:
                mismatched["{}.{}".format(name, field)] = (ours, fields["{}.{}".format(name, field)])
    assert mismatched == {}


_PROTOTYPE = re.compile(r"DCMIDLLEXPORT\s+int\s+(\w+)\s*\(([^;]*?)\)\s*;", re.S)


def test_every_function_of_the_header_has_its_argument_count():
    prototypes = {name: args for name, args in _PROTOTYPE.findall(open(HEADER).read())}
    assert len(prototypes) > 60
    for name, args in prototypes.items():
        assert name in bindings.SIGNATURES, name
        expected = 0 if args.strip() in ("", "void") else args.count(",") + 1
        if bindings.SIGNATURES[name] is not None:  # None: declared, never called (by-value struct + callback)
            assert len(bindings.SIGNATURES[name]) == expected, name


def test_every_return_code_is_named():
    text = open(os.path.join(os.path.dirname(FIXTURES), "..", "npumon", "sources", "dcmi", "bindings.py")).read()
    assert "DCMI_ERR_CODE_NOT_SUPPORT" in text
    for code in (-8001, -8006, -8012, -8255, -99998):
        assert bindings.code_name(code).split(" ", 1)[1] != "unknown DCMI code"
    assert bindings.code_name(-8255) == "-8255 DCMI_ERR_CODE_NOT_SUPPORT"
    assert bindings.code_name(-1234) == "-1234 unknown DCMI code"
