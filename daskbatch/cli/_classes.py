"""``--classes`` means class values on every command; ``--n-classes`` is a number of classes.

``describe --classes 0,1,7`` declares the label's values. ``synth``, ``demo`` and ``plan``
take a number (``--n-classes 3``); there ``--classes`` still accepts values, and uses their
count. One integer given to ``--classes`` there is refused: it could be a count (what those
commands once took) or one class value, and the two give different answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def parse_classes(text: str | None) -> list[int] | None:
    """Parse ``--classes``: ``"0,1,7"`` -> [0, 1, 7]."""
    if text is None:
        return None
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers (e.g. 0,1,7), got {text!r}") from None


def n_classes_options(minimum: int, help_: str) -> Callable[[F], F]:
    """Add ``--n-classes K`` (parameter ``n_classes``) and ``--classes V1,V2,...`` (``class_values``)."""

    def decorate(func: F) -> F:
        """Add the two options to ``func``."""  # numpydoc ignore=PR01,RT01
        func = click.option(
            "--classes", "class_values", default=None, metavar="V1,V2,...",
            help="Class values (e.g. 0,1,2), as on every command: their number is used. "
            "To give the number itself, use --n-classes.",
        )(func)
        return click.option("--n-classes", "n_classes", type=click.IntRange(min=minimum), default=None,
                            help=help_)(func)  # type: ignore[no-any-return]

    return decorate


def resolve_n_classes(n_classes: int | None, class_values: str | None, *, consecutive: bool) -> int | None:
    """The number of classes from ``--n-classes`` and ``--classes``; ValueError (one line) when unclear."""
    values = parse_classes(class_values)
    if values is None:
        return n_classes
    if len(values) == 1:
        raise ValueError(
            f"--classes takes class values (e.g. 0,1,2), and {class_values!r} is a single value; "
            f"for a number of classes use --n-classes {values[0]}"
        )
    if len(set(values)) != len(values):
        raise ValueError(f"--classes lists a value twice: {class_values!r}")
    if consecutive and sorted(values) != list(range(len(values))):
        raise ValueError(
            f"this command labels its classes 0 to K-1, so --classes must list 0,1,...,K-1, got {class_values!r}; "
            "use --n-classes K"
        )
    if n_classes is not None and n_classes != len(values):
        raise ValueError(f"--classes lists {len(values)} values but --n-classes is {n_classes}")
    return len(values)
