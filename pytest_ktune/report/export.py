"""The tuned parameters of every target, device and key, for code built ahead of time: a C++ header and JSON.

``ktune export`` reads the params file and the targets' declarations (for their defaults and parameter
names) and writes one of:

- a C++17 header: per target a namespace with ``Params`` and ``Key`` structs, ``kDefault``, one namespace per
  device holding a ``constexpr Params`` per key, one table of every entry, and ``lookup(device, key)`` for a
  key known only at run time, which falls back to ``kDefault``;
- JSON (``pytest-ktune-export/1``), the same content for other runtimes;
- a Python module: ``DEFAULTS`` and ``CONFIGS`` dicts and ``lookup(target, device, **key)``, for a Triton
  user's own dispatch (``kernel[grid](..., **lookup("rmsnorm", device, T=64, H=4096))``).

All are deterministic: records in the params file's order (sorted by target, device and key), no date, no
absolute path; the same params file gives the same bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_ktune.core.errors import KtuneError
from pytest_ktune.core.space import Value
from pytest_ktune.core.store import Store, target_id
from pytest_ktune.core.target import Target

FORMAT = "pytest-ktune-export/1"

_CPP_KEYWORDS = frozenset([
    "alignas", "alignof", "and", "asm", "auto", "bool", "break", "case", "catch", "char", "class", "const",
    "constexpr", "continue", "decltype", "default", "delete", "do", "double", "else", "enum", "explicit", "export",
    "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace",
    "new", "noexcept", "not", "nullptr", "operator", "or", "private", "protected", "public", "register", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "template", "this", "throw", "true", "try",
    "typedef", "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile", "while", "xor"])


@dataclass(frozen=True)
class Entry:
    """One record: the parameters production uses for a device and key."""

    device: str
    key: Mapping[str, Any]
    params: Mapping[str, Value]


@dataclass(frozen=True)
class Exported:
    """One target's parameters as the export writes them."""

    ident: str  # as the params file names the target: file::name
    name: str
    params: tuple[str, ...]
    default: Mapping[str, Value]
    key: tuple[str, ...]
    entries: tuple[Entry, ...]


def collect(store: Store, targets: Sequence[Target]) -> tuple[list[Exported], list[str]]:
    """Each target with its records, and the params file's targets that none of ``targets`` is."""
    root = store.root
    by_id = {target_id(t, root): t for t in targets}
    records: dict[str, list[Entry]] = {}
    for k in sorted(store.records):
        r = store.records[k]
        records.setdefault(r.target, []).append(Entry(r.device, dict(r.key), dict(r.params)))
    out = []
    for ident in sorted(by_id):
        t = by_id[ident]
        entries = tuple(records.get(ident, ()))
        keys = {tuple(sorted(e.key)) for e in entries}
        if len(keys) > 1:
            raise KtuneError(f"the params file names {ident}'s keys in {len(keys)} ways: "
                             f"{' / '.join(','.join(k) for k in sorted(keys))}", where=str(store.path),
                             hint="tune again, or delete the records of the old key, so that every record of a "
                                  "target has the same key names")
        # A target's per-backend spaces (per_backend=) add or drop parameters on one backend: the header
        # names every parameter any backend has, and a record lacks only those its backend dropped,
        # which take the default.
        views = [t, *(t.for_backend(b) for b in t.per_backend)]
        names = tuple(dict.fromkeys(n for v in views for n in v.space.names))
        default: dict[str, Value] = {}
        for v in reversed(views):
            default.update(v.default)
        default = {n: default[n] for n in names}
        filled = []
        for e in entries:
            view = t.for_backend(_backend_of(e.device))
            space = view.space.names
            e = Entry(e.device, e.key, view.complete(e.params))  # noqa: PLW2901 - a record of an older space
            if set(e.params) != set(space):
                raise KtuneError(f"a record of {ident} for {e.device} has the parameters {sorted(e.params)}, the "
                                 f"target's space there {list(space)}", where=str(store.path),
                                 hint="tune that key again: the space changed since it was recorded")
            filled.append(Entry(e.device, e.key, {**default, **e.params}))
        out.append(Exported(ident, t.name, names, default, next(iter(keys), ()), tuple(filled)))
    unknown = sorted(set(records) - set(by_id))
    return out, unknown


def _backend_of(device: str) -> str:
    """The backend a params file's device name ends with (``NVIDIA H200 [cuda]`` -> ``cuda``)."""
    return device.rsplit("[", 1)[-1].rstrip("]") if device.endswith("]") else ""


def render_json(targets: Iterable[Exported], source: str) -> str:
    data = {"format": FORMAT, "source": source, "targets": [
        {"target": t.ident, "name": t.name, "params": list(t.params), "default": dict(t.default),
         "key": list(t.key), "entries": [{"device": e.device, "key": dict(e.key), "params": dict(e.params)}
                                         for e in t.entries]} for t in targets]}
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def render_python(targets: Iterable[Exported], source: str) -> str:
    """The records as a Python module of literals: per target its default, and per device and key (a tuple of
    the key's sorted items) the parameters; ``lookup`` falls back to the default for a key never tuned."""
    listed = list(targets)
    lines = [f'"""Tuned parameters by target, device and key, written by ktune export from {source}: do not edit."""',
             "", "from __future__ import annotations", "", "from typing import Any", "",
             "DEFAULTS: dict[str, dict[str, Any]] = {"]
    lines += [f"    {t.name!r}: {dict(t.default)!r}," for t in listed]
    lines += ["}", "", "CONFIGS: dict[str, dict[tuple[str, tuple[tuple[str, Any], ...]], dict[str, Any]]] = {"]
    for t in listed:
        lines.append(f"    {t.name!r}: {{")
        lines += [f"        ({e.device!r}, {tuple(sorted(e.key.items()))!r}): {dict(e.params)!r}," for e in t.entries]
        lines.append("    },")
    lines += ["}", "", "", "def lookup(target: str, device: str, **key: Any) -> dict[str, Any]:",
              '    """The parameters recorded for ``target`` on ``device`` (as the params file names it) and ``key``;',
              '    the target\'s default where none is recorded."""',
              "    found = CONFIGS[target].get((device, tuple(sorted(key.items()))))",
              "    return dict(found if found is not None else DEFAULTS[target])", ""]
    return "\n".join(lines)


def identifier(text: str) -> str:
    """``text`` as a C++ identifier: other characters become ``_``, a leading digit or a keyword gets one."""
    ident = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9_]", "_", text)).strip("_") or "_"
    if ident[0].isdigit():
        ident = "_" + ident
    return ident + "_" if ident in _CPP_KEYWORDS else ident


def _literal(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v}LL" if not -(2 ** 31) <= v < 2 ** 31 else str(v)
    if isinstance(v, float):
        return repr(v)
    text = str(v).encode("unicode_escape").decode("ascii").replace('"', '\\"')
    return f'"{text}"'


def _ctype(values: Iterable[Any], what: str, wide: bool = False) -> str:
    """The C++ type of a field holding ``values``; ``wide``: whole numbers as long long (keys, which callers
    compute in long long, such as bucket's result)."""
    values = list(values)
    kinds = {bool if isinstance(v, bool) else int if isinstance(v, int) else float if isinstance(v, float) else str
             for v in values}
    if kinds <= {int}:
        big = wide or any(not -(2 ** 31) <= int(v) < 2 ** 31 for v in values)
        return "long long" if big else "int"
    if kinds <= {int, float}:
        return "double"
    if kinds == {bool}:
        return "bool"
    if kinds == {str}:
        return "std::string_view"
    raise KtuneError(f"{what} has values of several kinds ({sorted(k.__name__ for k in kinds)})",
                     hint="give it values of one kind (numbers or strings) in every record")


def _unique(names: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    used: set[str] = set()
    for n in names:
        ident, i = identifier(n), 2
        base = ident
        while ident in used:
            ident, i = f"{base}_{i}", i + 1
        used.add(ident)
        out[n] = ident
    return out


def _target_header(t: Exported, ns: str) -> list[str]:
    pnames = _unique(t.params)
    knames = _unique(t.key)
    ptypes = {p: _ctype([t.default[p], *(e.params[p] for e in t.entries)], f"{t.name}'s parameter {p}")
              for p in t.params}
    ktypes = {k: _ctype([e.key[k] for e in t.entries], f"{t.name}'s key {k}", wide=True) for k in t.key}

    def params(values: Mapping[str, Value]) -> str:
        return "{" + ", ".join(_literal(values[p]) for p in t.params) + "}"

    def key(values: Mapping[str, Any]) -> str:
        return "{" + ", ".join(_literal(values[k]) for k in t.key) + "}"

    out = [f"namespace {ns} {{  // {t.ident}", "",
           "/// The template parameters, as the space names them.", "struct Params {"]
    out += [f"  {ptypes[p]} {pnames[p]};" for p in t.params] + ["};", ""]
    out += ["/// The tuning key, its fields in this order (sorted by name).", "struct Key {"]
    out += [f"  {ktypes[k]} {knames[k]};" for k in t.key] + ["};", ""]
    same = " && ".join(f"a.{knames[k]} == b.{knames[k]}" for k in t.key) or "true"
    out += ["constexpr bool operator==(const Key& a, const Key& b) noexcept {",
            f"  return {same};" if t.key else "  return (void)a, (void)b, true;", "}", "",
            "constexpr bool operator==(const Params& a, const Params& b) noexcept {",
            "  return " + (" && ".join(f"a.{pnames[p]} == b.{pnames[p]}" for p in t.params) or "true") + ";",
            "}", "", "/// What the target runs where nothing is recorded: its default.",
            f"inline constexpr Params kDefault{params(t.default)};", "",
            "struct Entry {", "  std::string_view device;", "  Key key;", "  Params params;", "};", ""]
    devices: dict[str, list[Entry]] = {}
    for e in t.entries:
        devices.setdefault(e.device, []).append(e)
    dnames = _unique(devices)
    for device, entries in devices.items():
        out += [f"/// {device}", f"namespace {dnames[device]} {{",
                f"inline constexpr std::string_view kDevice = {_literal(device)};"]
        names = _unique("_".join(_label(k, e.key[k]) for k in t.key) or "any" for e in entries)
        for e, label in zip(entries, names.values(), strict=True):
            out.append(f"inline constexpr Params {label}{params(e.params)};  // {_key_text(e.key)}")
        out += [f"}}  // namespace {dnames[device]}", ""]
    rows = [f"    Entry{{{_literal(e.device)}, {key(e.key)}, {params(e.params)}}}," for e in t.entries]
    out.append("/// Every recorded entry, in the params file's order.")
    if rows:
        out += [f"inline constexpr std::array<Entry, {len(rows)}> kEntries{{{{", *rows, "}};", ""]
    else:
        out += ["inline constexpr std::array<Entry, 0> kEntries{};", ""]
    out += ["/// The parameters recorded for `device` and `key`, else kDefault. `device` is the params file's name",
            "/// for it (\"NVIDIA H200 [cuda]\") or the device's own (cudaDeviceProp::name: \"NVIDIA H200\").",
            "constexpr Params lookup(std::string_view device, const Key& key) noexcept {",
            "  for (const Entry& e : kEntries) {",
            "    if (e.key == key && detail::same_device(e.device, device)) return e.params;",
            "  }", "  return kDefault;", "}", "", f"}}  // namespace {ns}", ""]
    return out


def _label(name: str, value: Any) -> str:
    """A key's field in a constant's name: numbers after their name (T64), other values alone (float16)."""
    return f"{name}{value}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _key_text(key: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={key[k]}" for k in sorted(key))


def render_header(targets: Sequence[Exported], source: str, namespace: str = "ktune") -> str:
    ns = identifier(namespace)
    out = [f"// Tuned parameters from {source}, written by `ktune export`: do not edit; export again after",
           "// tuning. One namespace per target: Params, Key, kDefault, a namespace per device with a constexpr",
           "// Params per key, kEntries (every entry) and lookup(device, key), which falls back to kDefault.",
           "// Needs C++17 or later (inline constexpr tables, std::string_view): build with -std=c++17.",
           "#pragma once", "", "#if __cplusplus < 201703L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 201703L)",
           '#error "this header (written by ktune export) needs C++17 or later: build with -std=c++17"', "#endif",
           "", "#include <array>", "#include <string_view>", "", f"namespace {ns} {{", "",
           "/// The power of two at or above n: ktune.bucket, the T of a key such as {\"T\": ktune.bucket(tokens)}.",
           "constexpr long long bucket(long long n) noexcept {", "  long long p = 1;", "  while (p < n) p <<= 1;",
           "  return p;", "}", "", "namespace detail {",
           "/// Whether the params file's device name `recorded` (\"NVIDIA H200 [cuda]\") is `given`: the same name,",
           "/// or the device's own name without the backend.",
           "constexpr bool same_device(std::string_view recorded, std::string_view given) noexcept {",
           "  if (recorded == given) return true;", "  const auto cut = recorded.rfind(\" [\");",
           "  return cut != std::string_view::npos && recorded.substr(0, cut) == given;", "}",
           "}  // namespace detail", ""]
    names = _unique(t.name if sum(u.name == t.name for u in targets) == 1 else t.ident for t in targets)
    for t, ns_name in zip(targets, names.values(), strict=True):
        out += _target_header(t, ns_name)
    out += [f"}}  // namespace {ns}", ""]
    return "\n".join(out)
