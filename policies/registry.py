"""The ``Policy`` protocol, the registry of policies by name, and the policies' typed options.

A policy is a frozen dataclass whose fields are its options, decorated with ``@register_policy("name")``; the
registration alone sets the class's ``name`` and makes every construction of the class check its options
(:func:`check_options`, before the class's own ``__post_init__`` if it has one: that is where checks that
span several options go). Every module in the ``policies`` package is imported on first lookup, so adding a
policy is one new module and nothing else.

Options are parsed and checked here, in one place, from the fields' annotations, before any planning: a
field may be ``int``, ``float``, ``bool``, ``str`` or a ``Literal[...]`` of one of them, each optionally
``| None``. A field declares what else is valid beside it with :func:`option` (a range, or choices for a
``str``)::

    @register_policy("mine")
    @dataclass(frozen=True)
    class Mine:
        tolerance: float = option(0.05, ge=0.0, le=10.0)
        cp_engine: str = option("ring", choices=("ring", "ulysses"))
        degrees: Literal["pow2", "any"] = "pow2"

``Mine(tolerance=-1)`` is then a :class:`PolicyError` as much as ``create_policy("mine", tolerance=-1)`` is.

Values written as text (a command line's ``key=value``) are parsed by the same types: ``abc`` for an ``int``
is an error naming the policy, the option, the value and what is valid, never a traceback.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import numbers
import pkgutil
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    Protocol,
    TypeVar,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    runtime_checkable,
)

from dcpsim.policies.errors import PolicyError
from dcpsim.userfile import INT64_MAX

if TYPE_CHECKING:  # only for annotations: importing cost_models here would load scipy for 'dcpsim --help'
    from dcpsim.cost_models.base import CostModel
    from dcpsim.cost_models.specs import JobSpec
    from dcpsim.policies.plan import Plan
    from dcpsim.traces.batching import GlobalBatch


@runtime_checkable
class Policy(Protocol):
    """Decides CP groups, degrees, engines and microbatches for one global batch; deterministic."""

    @property
    def name(self) -> str: ...

    def plan(self, batch: GlobalBatch, job: JobSpec, cost_model: CostModel) -> Plan: ...


OPTION_METADATA = "dcpsim.option"  # the dataclass field-metadata key that :func:`option` fills


@dataclasses.dataclass(frozen=True)
class OptionType:
    """What one option (or scenario field) accepts: a base type, None or not, choices, a closed/open range.

    ``base`` is ``int``, ``float``, ``bool`` or ``str``; ``choices`` (from a ``Literal`` or :func:`option`)
    lists the only valid values; ``ge``/``gt``/``le`` bound numbers.
    """

    base: type
    optional: bool = False
    choices: tuple[Any, ...] | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None

    @staticmethod
    def of(annotation: Any, metadata: Mapping[str, Any] | None = None) -> OptionType:
        """The type of a field from its (resolved) annotation and its :func:`option` metadata.

        Raises TypeError for an annotation this module cannot parse values of (a policy author's error)."""
        optional = False
        tp = annotation
        if get_origin(tp) in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            optional = len(args) < len(get_args(tp))
            if len(args) != 1:
                raise TypeError(f"unsupported option annotation {annotation!r}: one type, optionally | None")
            tp = args[0]
        choices: tuple[Any, ...] | None = None
        if get_origin(tp) is Literal:
            choices = get_args(tp)
            kinds = {type(c) for c in choices}
            if len(kinds) != 1:
                raise TypeError(f"unsupported option annotation {annotation!r}: Literal values of one type")
            tp = kinds.pop()
        if tp not in (int, float, bool, str):
            raise TypeError(f"unsupported option annotation {annotation!r}: use int, float, bool, str or Literal")
        extra = dict(metadata.get(OPTION_METADATA, {})) if metadata else {}
        if extra.get("choices") is not None:
            choices = tuple(extra["choices"])
        return OptionType(tp, optional, choices, extra.get("ge"), extra.get("gt"), extra.get("le"))

    def describe(self) -> str:
        """What is valid, in words: 'an integer ≥ 1, or None'."""
        if self.choices is not None:
            text = "one of " + ", ".join(str(c) for c in self.choices)
        else:
            text = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}[self.base]
            bounds = [f"> {_num(self.gt)}" if self.gt is not None else "",
                      f"≥ {_num(self.ge)}" if self.ge is not None else "",
                      f"≤ {_num(self.le)}" if self.le is not None else ""]
            bounds = [b for b in bounds if b]
            if bounds:
                text += " " + " and ".join(bounds)
        return text + (", or None" if self.optional else "")

    def parse(self, value: Any, from_text: bool = False) -> Any:
        """``value`` as this type; ValueError('expected <describe()>') if it is not valid.

        ``from_text``: ``value`` was written as text (a command line), so '4' is an int, 'true' a bool and
        'none' None. Otherwise it must already have the type (an int is accepted for a float)."""
        if from_text and isinstance(value, str):
            value = self._from_text(value.strip())
        if value is None:
            if self.optional:
                return None
            raise ValueError(f"expected {self.describe()}")
        if self.base is bool:
            ok = isinstance(value, bool)
        elif self.base is int:
            ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        elif self.base is float:
            ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))
        else:
            ok = isinstance(value, str)
        if not ok:
            raise ValueError(f"expected {self.describe()}")
        if self.base is int and not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise ValueError(f"expected {self.describe()} (outside the int64 range ±{INT64_MAX:,})")
        value = self.base(value)
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"expected {self.describe()}")
        if ((self.ge is not None and value < self.ge) or (self.gt is not None and value <= self.gt)
                or (self.le is not None and value > self.le)):
            raise ValueError(f"expected {self.describe()}")
        return value

    def arg_type(self) -> Callable[[str], Any]:
        """This type as an argparse ``type=``: ``--timeout abc`` becomes argparse's one-line error."""
        import argparse

        def parse(text: str) -> Any:
            try:
                return self.parse(text, from_text=True)
            except ValueError as e:
                raise argparse.ArgumentTypeError(f"{text!r} is invalid: {e}") from None

        parse.__name__ = self.describe()
        return parse

    def _from_text(self, text: str) -> Any:
        low = text.lower()
        if self.optional and low in ("none", "null"):
            return None
        if self.base is bool:
            return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(low, text)
        if self.base in (int, float):
            try:
                return self.base(text)
            except ValueError:
                return text  # not a number: parse() says what is expected
        return text


def _num(x: float) -> str:
    return f"{x:g}"


def option(default: Any, *, ge: float | None = None, gt: float | None = None, le: float | None = None,
           choices: Iterable[Any] | None = None) -> Any:
    """A policy option's dataclass field: its default, and what is valid beside the type (a range, choices)."""
    meta = {"ge": ge, "gt": gt, "le": le, "choices": tuple(choices) if choices is not None else None}
    return dataclasses.field(default=default, metadata={OPTION_METADATA: meta})


_OPTION_TYPES: dict[type, dict[str, OptionType]] = {}  # by class: every policy built checks its options


def option_types(cls: type) -> dict[str, OptionType]:
    """The options of a dataclass (its init fields, except ``name``) and their types (computed once per class;
    callers must not mutate the dict)."""
    cached = _OPTION_TYPES.get(cls)
    if cached is not None:
        return cached
    if not dataclasses.is_dataclass(cls):
        return {}
    hints = get_type_hints(cls)
    out = _OPTION_TYPES[cls] = {f.name: OptionType.of(hints[f.name], f.metadata) for f in dataclasses.fields(cls)
                                if f.init and f.name != "name"}
    return out


def check_options(policy: Any) -> None:
    """Check a built policy's option values against their declared types. A registered policy runs it whenever
    it is built (:func:`register_policy`); a policy that still calls it from its own ``__post_init__`` runs
    it twice, with the same result."""
    label = getattr(type(policy), "name", type(policy).__name__)
    for key, ot in option_types(type(policy)).items():
        value = getattr(policy, key)
        try:
            ot.parse(value)
        except ValueError as e:
            raise PolicyError(f"policy {label!r}: option {key} = {value!r} is invalid: {e}") from None


_REGISTRY: dict[str, type] = {}
_TYPES: dict[str, dict[str, OptionType]] = {}
T = TypeVar("T", bound=type)


def _check_options_when_built(cls: type) -> None:
    """Make every construction of ``cls`` (direct, :func:`create_policy`, ``dataclasses.replace``) run
    :func:`check_options` first, then the class's own ``__post_init__`` if it has one.

    A dataclass's generated ``__init__`` calls ``__post_init__`` only if the class had one when it was made,
    so a class with one gets it wrapped, and a class without one gets its ``__init__`` wrapped. A method that
    already checks (inherited from a registered class) is left as it is."""
    post = getattr(cls, "__post_init__", None)
    if post is not None:
        if getattr(post, _CHECKS_OPTIONS, False):
            return

        @functools.wraps(post)
        def __post_init__(self: Any) -> None:
            check_options(self)
            post(self)

        setattr(__post_init__, _CHECKS_OPTIONS, True)
        cls.__post_init__ = __post_init__  # type: ignore[attr-defined]
        return
    init = cls.__init__  # type: ignore[misc]  # the class's own, which the wrapper calls
    if getattr(init, _CHECKS_OPTIONS, False):
        return

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        check_options(self)

    setattr(__init__, _CHECKS_OPTIONS, True)
    cls.__init__ = __init__  # type: ignore[misc]


_CHECKS_OPTIONS = "__dcpsim_checks_options__"  # marks a method that runs check_options


def register_policy(name: str) -> Callable[[T], T]:
    """Register a policy class under ``name``, set its ``name`` and make each construction check its options
    (:func:`check_options`, then the class's own ``__post_init__``); the option annotations are checked
    now."""
    def deco(cls: T) -> T:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise PolicyError(f"policy name {name!r} is registered twice ({_REGISTRY[name].__name__}, "
                              f"{cls.__name__})")
        if cls.__dict__.get("name", name) != name:
            raise PolicyError(f"{cls.__name__} is registered as {cls.__dict__['name']!r} and {name!r}")
        try:
            _TYPES[name] = option_types(cls)
        except TypeError as e:
            raise PolicyError(f"policy {name!r} ({cls.__name__}): {e}") from None
        # None stands for "the default" everywhere (create_policy drops it), so it must be the default
        for f in dataclasses.fields(cls):
            if f.name in _TYPES[name] and _TYPES[name][f.name].optional and f.default is not None:
                del _TYPES[name]
                raise PolicyError(f"policy {name!r} ({cls.__name__}): option {f.name} may be None, so its default "
                                  f"must be None (None means: the default), not {f.default!r}")
        cls.name = name  # type: ignore[attr-defined]  # the registration is the one place a name is set
        _check_options_when_built(cls)
        _REGISTRY[name] = cls
        return cls
    return deco


def _discover() -> None:
    """Import every module of this package (found beside this file: importing the package itself from here
    would tie this module and ``policies/__init__`` in an import circle)."""
    for mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__package__}.{mod.name}")


def available_policies() -> list[str]:
    _discover()
    return sorted(_REGISTRY)


def _lookup(name: str) -> type:
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise PolicyError(f"unknown policy {name!r}; valid: {', '.join(sorted(_REGISTRY))}") from None


def policy_options(name: str) -> dict[str, Any]:
    """Option names of a policy with their defaults."""
    cls = _lookup(name)
    return {f.name: f.default for f in dataclasses.fields(cls) if f.name in _TYPES[name]}


def policy_option_types(name: str) -> dict[str, OptionType]:
    """Option names of a policy with what each accepts."""
    _lookup(name)
    return dict(_TYPES[name])


def parse_options(name: str, options: Mapping[str, Any], from_text: bool = False) -> dict[str, Any]:
    """``options`` of policy ``name`` parsed and checked by their declared types.

    An unknown policy or option, or an invalid value, is a :class:`PolicyError` naming the policy, the option,
    the value and what is valid. ``from_text``: the values are text as written on a command line."""
    _lookup(name)
    types_ = _TYPES[name]
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key not in types_:
            raise PolicyError(f"policy {name!r} has no option {key!r}; valid: {', '.join(sorted(types_)) or 'none'}")
        try:
            out[key] = types_[key].parse(value, from_text)
        except ValueError as e:
            raise PolicyError(f"policy {name!r}: option {key} = {value!r} is invalid: {e}") from None
    return out


def check_shared_options(options: Mapping[str, Any]) -> None:
    """Options meant for every policy that takes them (a scenario's ``policy_options``): each must be an
    option of some policy, with a value valid for every policy that takes it; else :class:`PolicyError`."""
    names = available_policies()
    for key, value in options.items():
        takers = [n for n in names if key in _TYPES[n]]
        if not takers:
            every = sorted({k for n in names for k in _TYPES[n]})
            raise PolicyError(f"no policy has an option {key!r}; options: {', '.join(every)}")
        for n in takers:
            parse_options(n, {key: value})


def create_policy(name: str, **options: Any) -> Policy:
    """Instantiate policy ``name`` with ``options``, parsed and checked first (:func:`parse_options`).

    Options set to None are dropped (None means the default, which registration makes sure of), so a CLI can
    pass every flag it has.
    """
    cls = _lookup(name)
    typed = parse_options(name, {k: v for k, v in options.items() if v is not None})
    policy: Policy = cls(**typed)
    return policy
