"""Encoders of the clusterforge roles' templates: every value goes into a generated file by that file's own rules.

Blueprint values are data (``docs/security.md``). The blueprint loader admits only the characters each kind of
value may hold; these filters are the second layer, so that a value the loader should have refused still
cannot change a file's structure: it is encoded (TOML strings and keys, systemd unit names) or, where the
format has no quoting, refused with an error that names the value (one line of a line-oriented config, a
fstab field, a deb822 field, a word that must not read as a command-line option). Shell files use Ansible's
own ``quote`` filter.

Ansible loads this file as a filter plugin of the ``clusterforge_common`` role (a dependency of the roles
that use it); the cloud path (``blueprints/role_templates.py``) registers the same functions, so both render
the same bytes.
"""

from __future__ import annotations

import re

try:  # inside Ansible a filter error is AnsibleFilterError; the cloud renderer catches ValueError
    from ansible.errors import AnsibleFilterError as _FilterError
except ImportError:  # pragma: no cover - Ansible is always installed with clusterforge
    _FilterError = ValueError  # type: ignore[assignment,misc]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class EncodeError(_FilterError, ValueError):  # type: ignore[misc,valid-type]
    """A value that the target format cannot hold as data (the message names the value and the format)."""


def _text(value: object, fmt: str) -> str:
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise EncodeError(f"{fmt}: {value!r} is not a string")
    return str(value)


def one_line(value: object) -> str:
    """``value`` unchanged when it holds no newline or other control character (a line-oriented file:
    ``/etc/nccl.conf``, ``sysctl.d``, ``modules-load.d``, ifupdown); raises :class:`EncodeError` otherwise,
    since one more line would be one more setting."""
    text = _text(value, "one line")
    if _CONTROL.search(text):
        raise EncodeError(f"one line: {text!r} holds a newline or control character")
    return text


def fstab_field(value: object) -> str:
    """``value`` as one fstab field (device, mount point, options): unchanged when it holds no whitespace,
    control character or ``#`` at its start; raises :class:`EncodeError` otherwise. fstab separates fields by
    whitespace (https://man7.org/linux/man-pages/man5/fstab.5.html)."""
    text = _text(value, "fstab field")
    if not text or re.search(r"\s", text) or _CONTROL.search(text) or text.startswith("#"):
        raise EncodeError(f"fstab field: {text!r} is empty or holds whitespace, a control character or a leading #")
    return text


def deb822_field(value: object) -> str:
    """``value`` as the value of one deb822 field (``Suites:``, ``Components:``, ``URIs:``): unchanged when it is
    not empty and holds no newline or control character; raises :class:`EncodeError` otherwise. A newline
    followed by text would start another field, such as ``Trusted: yes``
    (https://manpages.debian.org/bookworm/apt/sources.list.5.en.html#DEB822-STYLE_FORMAT)."""
    text = _text(value, "deb822 field")
    if not text.strip() or _CONTROL.search(text):
        raise EncodeError(f"deb822 field: {text!r} is empty or holds a newline or control character")
    return text


def not_option(value: object) -> str:
    """``value`` unchanged when it cannot read as a command-line option (does not start with ``-``) and holds no
    whitespace or control character: a package name, host or user handed to a command; raises
    :class:`EncodeError` otherwise."""
    text = _text(value, "argument")
    if not text or text.startswith("-") or re.search(r"\s", text) or _CONTROL.search(text):
        raise EncodeError(f"argument: {text!r} is empty, starts with '-' or holds whitespace")
    return text


def modprobe_value(value: object) -> str:
    """``value`` as a double-quoted module parameter value of ``modprobe.d`` (``options lnet networks="..."``):
    unchanged when it holds no ``"``, whitespace or control character; raises :class:`EncodeError` otherwise.
    modprobe splits an ``options`` line at whitespace outside double quotes and has no escape, and a new line
    could be an ``install`` command that runs as root (https://man7.org/linux/man-pages/man5/modprobe.d.5.html)."""
    text = _text(value, "modprobe value")
    if not text or '"' in text or re.search(r"\s", text) or _CONTROL.search(text):
        raise EncodeError(f"modprobe value: {text!r} is empty or holds a quote, whitespace or control character")
    return text


def toml_string(value: object) -> str:
    """``value`` as a TOML basic string, quotes included: ``\\`` and ``"`` escaped, control characters as
    ``\\uXXXX`` (https://toml.io/en/v1.0.0#string)."""
    text = _text(value, "TOML string")
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif _CONTROL.match(ch):
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(value: object) -> str:
    """``value`` as one TOML key of a dotted table name: bare when it is ``A-Za-z0-9_-`` only, else a quoted
    basic string (https://toml.io/en/v1.0.0#keys)."""
    text = _text(value, "TOML key")
    return text if re.fullmatch(r"[A-Za-z0-9_-]+", text) else toml_string(text)


def systemd_escape(value: object) -> str:
    """``value`` escaped for a unit name as ``systemd-escape`` does: ``/`` becomes ``-``, every byte outside
    ``A-Za-z0-9:_.`` (and a leading ``.``) becomes ``\\xNN`` (https://www.freedesktop.org/software/systemd/man/
    latest/systemd.unit.html#String%20Escaping%20for%20Inclusion%20in%20Unit%20Names)."""
    text = _text(value, "systemd unit name")
    out = []
    for i, b in enumerate(text.encode()):
        ch = chr(b)
        if ch == "/":
            out.append("-")
        elif (ch.isascii() and (ch.isalnum() or ch in ":_.")) and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


FILTERS = {
    "clusterforge_one_line": one_line,
    "clusterforge_fstab_field": fstab_field,
    "clusterforge_deb822_field": deb822_field,
    "clusterforge_not_option": not_option,
    "clusterforge_modprobe_value": modprobe_value,
    "clusterforge_toml_string": toml_string,
    "clusterforge_toml_key": toml_key,
    "clusterforge_systemd_escape": systemd_escape,
}
"""Filter name -> function, as the templates call them (prefixed: Ansible's filter namespace is shared)."""


class FilterModule:
    """Ansible's entry point for a filter plugin file."""

    def filters(self) -> dict[str, object]:
        """The filters of this file (:data:`FILTERS`)."""
        return dict(FILTERS)
