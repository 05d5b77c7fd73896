"""ABI v2 (kernel/include/regress_attn.h): the parameter block's layout as the C compiler lays it out,
and the validator's refusals of the new fields. (Every backend implements the v2 fields since issue
40's gfx942 kernels, so the shared "not implemented yet" check is gone.)"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest
import torch
from c_probe import build_c

from regress.facts.abi import RA_ABI_VERSION, Params
from regress.kernel import KernelLibrary, load_library
from regress.native.build import REPO_ROOT, build_kernel

# A host program over the real headers: every field's offset and the size.
_PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include "common/validate.h"
#define OFF(f) printf("%s %zu\n", #f, offsetof(ra_attention_params, f));
int main(void) {
  OFF(abi_version) OFF(q) OFF(k) OFF(v) OFF(o) OFF(batch) OFF(heads) OFF(seqlen_q) OFF(seqlen_k)
  OFF(head_dim) OFF(q_stride) OFF(k_stride) OFF(v_stride) OFF(o_stride) OFF(scale) OFF(rounding)
  OFF(stream) OFF(heads_kv) OFF(mask) OFF(reserved) OFF(cu_seqlens_q) OFF(cu_seqlens_k)
  OFF(max_seqlen_q) OFF(max_seqlen_k) OFF(lse)
  printf("sizeof %zu\n", sizeof(ra_attention_params));
  return 0;
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    exe = build_c(_PROBE, tmp_path_factory.mktemp("abi"))
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines()}


def test_ctypes_params_is_the_c_struct(probe: dict[str, str]) -> None:
    for name, _ in Params._fields_:
        assert int(probe[name]) == getattr(Params, name).offset, name
    assert int(probe["sizeof"]) == ctypes.sizeof(Params)
    assert RA_ABI_VERSION == 2


@pytest.fixture(scope="module")
def lib() -> KernelLibrary:
    return load_library(build_kernel("cpu").path)  # type: ignore[return-value]


def _params(q: torch.Tensor, o: torch.Tensor) -> Params:
    p = Params()
    p.abi_version = RA_ABI_VERSION
    p.q = p.k = p.v = q.data_ptr()
    p.o = o.data_ptr()
    p.batch, p.heads, p.heads_kv, p.seqlen_q, p.seqlen_k, p.head_dim = 1, 2, 2, 4, 4, 128
    for name in ("q_stride", "k_stride", "v_stride", "o_stride"):
        getattr(p, name)[:] = [1024, 512, 128, 1]
    return p


def _varlen(p: Params, cu: ctypes.Array[ctypes.c_int32]) -> Params:
    p.batch = len(cu) - 1
    p.cu_seqlens_q = p.cu_seqlens_k = ctypes.addressof(cu)
    p.max_seqlen_q = p.max_seqlen_k = 4
    for name in ("q_stride", "k_stride", "v_stride", "o_stride"):
        getattr(p, name)[0] = 0
    return p


def test_v2_refusals_name_the_argument(lib: KernelLibrary) -> None:
    q = torch.zeros(1, 2, 4, 128, dtype=torch.bfloat16)
    o = torch.empty_like(q)
    err = ctypes.create_string_buffer(256)
    fwd = lib.raw.ra_attention_fwd
    good = (ctypes.c_int32 * 3)(0, 1, 4)

    def refused(p: Params) -> tuple[int, str]:
        o.fill_(7)
        rc = fwd(ctypes.byref(p), err, 256)
        assert bool((o == 7).all()), "a refused call wrote the output"
        return rc, err.value.decode()

    p = _params(q, o)
    assert fwd(ctypes.byref(p), err, 256) == 0
    assert fwd(ctypes.byref(_varlen(_params(q, o), good)), err, 256) == 0, err.value

    cases: list[tuple[str, int, str]] = []
    for hk in (0, 3, -1):
        p = _params(q, o)
        p.heads_kv = hk
        cases.append((*refused(p), "heads_kv"))
    p = _params(q, o)
    p.mask = 3
    cases.append((*refused(p), "mask 3"))
    p = _params(q, o)
    p.reserved = 1
    cases.append((*refused(p), "reserved"))
    p = _params(q, o)
    p.cu_seqlens_q = ctypes.addressof(good)
    cases.append((*refused(p), "cu_seqlens_k is null"))
    p = _params(q, o)
    p.max_seqlen_q = 4
    cases.append((*refused(p), "without cu_seqlens"))
    p = _varlen(_params(q, o), good)
    p.k_stride[0] = 8
    cases.append((*refused(p), "k_stride[0]"))
    p = _varlen(_params(q, o), good)
    p.max_seqlen_q = 5
    cases.append((*refused(p), "max_seqlen_q 5"))
    for bad, what in (((1, 1, 4), "cu_seqlens_q[0]"), ((0, 3, 1), "decreases"), ((0, 1, 3), "packed total")):
        cu = (ctypes.c_int32 * 3)(*bad)
        cases.append((*refused(_varlen(_params(q, o), cu)), what))
    p = _varlen(_params(q, o), good)
    p.max_seqlen_q = 2  # sequence 1 has 3 rows
    cases.append((*refused(p), "length 3 > max_seqlen_q 2"))
    lse = (ctypes.c_float * 9)()
    p = _params(q, o)
    p.lse = ctypes.addressof(lse) + 2
    cases.append((*refused(p), "lse is not 4-byte aligned"))
    for rc, text, want in cases:
        assert rc != 0 and want in text, (rc, text, want)
    # ra_validate (no memory touched) says the same for host seqlens
    cu = (ctypes.c_int32 * 3)(0, 3, 1)
    assert lib.raw.ra_validate(ctypes.byref(_varlen(_params(q, o), cu)), err, 256) == 11


def test_unsupported_status_is_distinct() -> None:
    text = (Path(REPO_ROOT) / "kernel/include/regress_attn.h").read_text()
    assert "RA_ERR_UNSUPPORTED = 9" in text and f"#define RA_ABI_VERSION {RA_ABI_VERSION}" in text
