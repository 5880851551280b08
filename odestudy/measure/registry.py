"""Types registered by name: an abstract type whose final subclasses add themselves to
its registry (a dict by name) when their class is defined, as modes, controllers,
integrators and studies do, and the one way a name is looked up in such a registry."""

from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")


class Registered:
    """A type whose final subclasses register themselves by name.

    The abstract type names its registry as a class keyword
    (`class AbstractMode(Registered, eqx.Module, registry=MODES)`). Each subclass that
    sets its own `name` (a str) in its class body is then added to that registry under
    its name when the class is defined, in the order defined; an abstract subclass in
    between, which sets none, is not.
    """

    _registry: ClassVar[dict[str, Any]]

    def __init_subclass__(cls, registry: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if registry is not None:
            cls._registry = registry
        name = cls.__dict__.get("name")
        if isinstance(name, str):  # a final class, not an abstract one
            cls._registry[name] = cls


def lookup(registry: Mapping[str, T], kind: str, name: str) -> T:
    """`registry[name]`; where there is none, a one-line ValueError naming the valid
    choices (`kind`: what is looked up, as the message names it: `"mode"`)."""
    if name not in registry:
        raise ValueError(f"unknown {kind} {name!r}; valid choices: {', '.join(registry)}")
    return registry[name]
