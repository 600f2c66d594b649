"""Typed, documented options: what a dimension (or an agent) accepts, checked in one place.

A dimension declares ``option_schema = (Option(...), ...)`` (see
:class:`spear_metrics.core.dimension.Dimension`); :func:`validate_options` types every value
given on the command line (``-o key=value``, always a string there) or to ``compute()`` (any
Python value), refuses unknown keys with a one-line error naming the valid ones, and checks
choices and ranges. Numbers go through THE number parser
(:func:`spear_datasets.schema.parse_number`). Agents get the same checks from their
constructor's signature (:func:`signature_options`).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from spear_datasets.schema import NumberError, parse_number

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_NONE = ("none", "null")


class OptionError(ValueError):
    """An option that is unknown, of the wrong type or out of range (one line; raised before any
    row is scored; the CLI exits 2)."""


@dataclass(frozen=True)
class Option:
    """One option of a dimension or agent.

    Attributes:
        name: the key (``-o name=value``, ``compute(name=value)``).
        type: ``str``, ``int``, ``float`` or ``bool``; values are converted to it.
        default: the value in effect when the option is not given (``None``: "not set", the
            dimension decides, e.g. the profile's model).
        doc: one line: what it does, with units.
        choices: the accepted values (``()``: any value of ``type``).
        minimum, maximum: inclusive range of a number (``None``: unbounded).
        secret: never written to ``summary.json`` or the work folder (API keys); recorded as
            ``"<set>"`` when given, and its value is masked wherever it appears
            (:func:`spear_metrics.core.secrets.register_secret`). Options read from a signature
            are secret when their name says so (``api_key``, ``token``, ``secret``, ``password``;
            not ``*_env``, which names the variable holding a key).
            A credential typed inside a URL value of any string option is masked the same way
            (:func:`spear_metrics.core.secrets.register_url_secrets`).
    """

    name: str
    type: type
    default: Any
    doc: str
    choices: tuple = ()
    minimum: float | None = None
    maximum: float | None = None
    secret: bool = False

    def coerce(self, value: Any, owner: str = "") -> Any:
        """``value`` converted to :attr:`type` and checked.

        Raises:
            OptionError: wrong type, not one of :attr:`choices`, out of range, or ``None``
                (``"none"``/``"null"``) for an option whose default is not ``None``.
        """
        where = f"{owner} option {self.name}" if owner else f"option {self.name}"
        if value is None or (isinstance(value, str) and value.strip().lower() in _NONE
                             and (self.type is not str or self.default is None)):
            if self.default is None:
                return None
            raise OptionError(f"{where} cannot be none (default {self.default!r})")
        if self.type is bool:
            out: Any = _bool(value, where)
        elif self.type in (int, float):
            try:
                out = parse_number(value, what=where, integer=self.type is int, minimum=self.minimum, maximum=self.maximum)
            except NumberError as e:
                raise OptionError(str(e)) from None
        else:
            if isinstance(value, (list, tuple)):  # compute(asr=["a", "b"]) for a comma list
                value = ",".join(str(v) for v in value)
            out = str(value).strip()
            from spear_metrics.core.secrets import register_url_secrets

            register_url_secrets(out)  # a key typed inside a URL (?key=..., user:password@) is masked from now on
        if self.choices and out not in self.choices:
            raise OptionError(f"{where} must be one of {', '.join(map(str, self.choices))}; got {value!r}")
        if self.secret:
            from spear_metrics.core.secrets import register_secret

            register_secret(out)  # masked in every message and file from now on
        return out

    def describe(self) -> str:
        """``name (type, default X[, one of a|b][, range]): doc`` on one line."""
        extra = []
        if self.choices:
            extra.append("one of " + "|".join(map(str, self.choices)))
        if self.minimum is not None or self.maximum is not None:
            lo = "" if self.minimum is None else f"{self.minimum:g} <= "
            hi = "" if self.maximum is None else f" <= {self.maximum:g}"
            extra.append(f"{lo}value{hi}")
        head = f"{self.name} ({self.type.__name__}, default {self.default!r}{''.join(', ' + e for e in extra)})"
        return f"{head}: {self.doc}" if self.doc else head


def _bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    low = str(value).strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise OptionError(f"{where} must be true or false, got {value!r}")


def validate_options(schema: Sequence[Option], given: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """The ``given`` options, converted and checked against ``schema`` (only the given keys).

    Raises:
        OptionError: a key the schema does not declare (the message lists the valid keys), or a
            value :meth:`Option.coerce` refuses.
    """
    by_name = {o.name: o for o in schema}
    unknown = [k for k in given if k not in by_name]
    if unknown:
        raise OptionError(unknown_message(unknown[0], owner, by_name))
    return {k: by_name[k].coerce(v, owner) for k, v in given.items()}


def unknown_message(key: str, owner: str, valid: Iterable[str]) -> str:
    """One line: ``unknown option 'x' for <owner>; valid: a, b`` (or ``takes no options``)."""
    names = sorted(valid)
    tail = f"valid: {', '.join(names)}" if names else f"{owner} takes no options"
    return f"unknown option {key!r} for {owner}; {tail}"


def options_in_effect(schema: Sequence[Option], given: Mapping[str, Any]) -> dict[str, Any]:
    """Every declared option with its value in effect (given, else default); secrets masked."""
    out = {}
    for o in schema:
        v = given.get(o.name, o.default)
        out[o.name] = ("<set>" if v is not None else None) if o.secret else v
    return out


def parse_pairs(pairs: Iterable[str] | None, *, names: bool = False) -> dict[str, str]:
    """``["k=v", ...]`` (CLI ``-o`` / ``-a``) -> ``{k: v}``, values kept as strings (the
    schema types them); ``-`` in keys read as ``_`` (option names); with ``names`` the keys are
    kept as written (names such as an adapter's ``openai-realtime``: ``--provider-limit``) and
    the values stripped. A repeated key: the last wins. THE parser of ``NAME=VALUE`` arguments.

    Raises:
        OptionError: a pair without ``=`` or with an empty key.
    """
    out: dict[str, str] = {}
    for pair in pairs or []:
        k, eq, v = str(pair).partition("=")
        if not eq or not k.strip():
            raise OptionError(f"option {pair!r} is not KEY=VALUE")
        if names:
            out[k.strip()] = v.strip()
        else:
            out[k.strip().replace("-", "_")] = v
    return out


# --------------------------------------------------------------------------- agents


#: An option name that holds a secret (its value is masked and never recorded).
SECRET_NAME = re.compile(r"api_?key|token|secret|password", re.IGNORECASE)


def plain_text(doc: str) -> str:
    """Docstring markup as plain text for the console: ````x```` and ```x``` -> ``x``,
    ``:func:`pkg.mod.f``` / ``:class:`~pkg.C``` -> ``f`` / ``C`` (a role's target, its last
    dotted part when it is a path), ``**x**`` / ``*x*`` -> ``x``."""
    def role(m: re.Match) -> str:
        target = m.group(1).lstrip("~")
        return target.rsplit(".", 1)[-1] if m.group(0).startswith(":") and "." in target and "(" not in target else target

    text = re.sub(r":[a-z]+:`([^`]+)`", role, doc)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"`([^`]+)`", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    return re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\1", text)


def signature_options(factory: Callable[..., Any]) -> tuple[tuple[Option, ...], bool]:
    """Options of a class or factory from its signature: ``(options, takes_any)``.

    Type: the annotation when it is ``str``/``int``/``float``/``bool`` (also as a string, or
    ``X | None``), else the default's type, else ``str``. Doc: the ``name: text`` line of an
    ``Args:`` block of the class or ``__init__`` docstring, when there is one. ``takes_any`` is
    ``True`` when the signature has ``**kwargs`` (unknown keys are then passed through as given).
    """
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return (), True
    docs = _arg_docs(inspect.getdoc(factory) or "") | _arg_docs(inspect.getdoc(target) or "")
    opts, takes_any = [], False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            takes_any = True
            continue
        if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY):
            continue
        default = None if p.default is p.empty else p.default
        opts.append(Option(p.name, _annotation_type(p.annotation, default), default, docs.get(p.name, ""),
                           # api_key_env names the variable that holds the key: not a secret itself
                           secret=bool(SECRET_NAME.search(p.name)) and not p.name.endswith("_env")))
    return tuple(opts), takes_any


def _annotation_type(annotation: Any, default: Any) -> type:
    simple = {"str": str, "int": int, "float": float, "bool": bool}
    if isinstance(annotation, str):
        names = [t.strip() for t in annotation.replace("Optional[", "").rstrip("]").split("|")]
        found = [simple[n] for n in names if n in simple]
        if found:
            return found[0]
    elif annotation in (str, int, float, bool):
        return annotation
    else:
        for a in getattr(annotation, "__args__", ()):
            if a in (str, int, float, bool):
                return a
    if isinstance(default, (bool, int, float, str)):
        return type(default)
    return str


def _arg_docs(doc: str) -> dict[str, str]:
    """``name: text`` entries of a Google-style ``Args:`` block (continuation lines joined)."""
    out: dict[str, str] = {}
    in_args, last, indent = False, None, 0
    for line in doc.splitlines():
        if re.match(r"^\s*(Args|Arguments|Parameters|Options):\s*$", line):
            in_args, last = True, None
            continue
        if not in_args:
            continue
        if not line.strip() or not line.startswith((" ", "\t")):
            in_args = bool(line.strip() == "" and last is None)
            continue
        m = re.match(r"^(\s+)(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
        if m and (last is None or len(m.group(1)) <= indent):
            indent, last = len(m.group(1)), m.group(2)
            out[last] = m.group(3).strip()
        elif last is not None:
            out[last] = f"{out[last]} {line.strip()}".strip()
    return out
