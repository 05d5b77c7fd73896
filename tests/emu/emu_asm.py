"""Shared pieces of the hand-written test kernels (see conftest.py for how they are built and run)."""

from __future__ import annotations

# Common prologue: s[4:11] = the 4 buffer pointers, v[6:7] = 4 * lane, v[2:3] = buf0 + 4 * lane.
PROLOGUE = """\
  s_load_dwordx8 s[4:11], s[0:1], 0x0
  v_lshlrev_b32 v6, 2, v0
  v_mov_b32 v7, 0
  s_waitcnt lgkmcnt(0)
  v_lshl_add_u64 v[2:3], s[4:5], 0, v[6:7]
"""


def lane_addr(buf: int, dst: str = "v[2:3]") -> str:
    """dst = buffer `buf` (0..3) + 4 * lane."""
    return f"  v_lshl_add_u64 {dst}, s[{4 + 2 * buf}:{5 + 2 * buf}], 0, v[6:7]\n"
