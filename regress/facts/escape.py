"""Stored text made inert for each output format: terminal, TSV, Markdown, XML.

Whatever a runner uploaded is data: a case name holding a newline must not forge a Markdown line, a
tab must not forge a TSV column, ESC must not reach the terminal, and a character XML 1.0 forbids
must not make the JUnit file ill-formed. Control characters are shown as `\\xNN` (or `\\uNNNN`),
visible and unambiguous. HTML is jinja2's autoescape; rich output is printed with markup off.
"""

from __future__ import annotations

import re

# C0, DEL and C1 controls; lone surrogates; the two XML non-characters; and the bidirectional
# overrides and isolates (U+202A-202E, U+2066-2069), which reorder what follows them on screen
# (issue 41 item 22: U+202E passed through every report).
_FORMAT = "\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff{_FORMAT}]")
_CONTROL_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff{_FORMAT}]")
# Characters that can start or change Markdown structure (CommonMark backslash-escapes them).
_MARKDOWN = re.compile(r"([\\`*\[\]<>|#~&{}$])")
# `_` between two letters or digits never opens or closes emphasis (case names are full of it and
# stay as they are); at a word's edge it does: `_x_` rendered as emphasis (issue 41 item 22).
_EDGE_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
# A spreadsheet reads a cell starting with one of these as a formula (`=cmd|' /C calc'!A0`).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def readable(value: object) -> str:
    """A scalar as a person reads it in text output (not JSON): None as "—", a bool as yes/no, a
    float to 4 significant digits (0.9999999999999999 reads 1), anything else as str. Python's
    reprs (`None`, `False`, 17 digits) are not output."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return value if isinstance(value, str) else str(value)  # a str subclass (Markup) stays itself


def visible(value: object) -> str:
    """One line of terminal (or TSV) text: every control character, tab and newline included,
    written as an escape."""
    return _CONTROL.sub(_shown, str(value))


def visible_lines(value: object) -> str:
    """Terminal text that may keep its newlines (a multi-line message), nothing else raw."""
    return _CONTROL_BUT_NEWLINE.sub(_shown, str(value))


def markdown(value: object) -> str:
    """Inline Markdown text (a table cell, a list item): structure characters backslash-escaped,
    controls (newline included) escaped, so one value stays one inert span."""
    escaped = _EDGE_UNDERSCORE.sub(r"\\_", _MARKDOWN.sub(r"\\\1", str(value)))
    return _CONTROL.sub(_shown, escaped)


def csv_cell(value: object) -> object:
    """A CSV cell a spreadsheet shows as text: a string that would start a formula gets a leading
    apostrophe (OWASP's advice); numbers and other values stay as they are."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def xml_text(value: object) -> str:
    """Text XML 1.0 can hold: the characters it forbids are written as escapes (tab and newline
    are allowed and kept). ElementTree escapes &, < and > itself."""
    return re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]", _shown, str(value))
