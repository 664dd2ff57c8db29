"""Typed errors. Each carries a one-line message for users, a hint, and an exit code.

The CLI prints ``error: <message> (<hint>)`` and exits with ``exit_code``; a traceback is only
shown with ``--debug``. The exit codes are documented in the README and must stay stable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from unframe.opset import is_default_domain


@dataclass(frozen=True)
class Blocker:
    """One reason a stage cannot take a model: found by a pre-flight check, reported with the others."""

    op: str
    reason: str
    node: str = ""
    domain: str = ""
    hint: str = ""

    def __str__(self) -> str:
        where = f"node {self.node!r} " if self.node else ""
        dom = "" if is_default_domain(self.domain) else f"{self.domain}::"
        hint = f" ({self.hint})" if self.hint else ""
        return f"{where}[{dom}{self.op}]: {self.reason}{hint}"

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


class UnframeError(Exception):
    """Base of every error a user can cause. ``str(e)`` is one line."""

    exit_code = 1
    kind = "error"

    def __init__(self, message: str, hint: str = "", *, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = " ".join(str(message).split())
        self.hint = " ".join(str(hint).split())
        self.details = details or {}

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled whole (message, hint, blockers, report...): errors cross from a sandboxed child
        # process (unframe.sandbox) back to the parent with every field.
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": self.kind,
            "exit_code": self.exit_code,
            "message": self.message,
            "hint": self.hint,
            **self.details,
        }


class UsageError(UnframeError):
    """Bad options or arguments."""

    exit_code = 2
    kind = "usage"


class InputError(UnframeError):
    """The input can't be read: missing, empty, corrupt, truncated, invalid graph, unsafe paths."""

    exit_code = 3
    kind = "input"


class ResourceLimitError(InputError):
    """The input would need more than a limit allows before anything is allocated or run: tensor
    bytes, parity inputs against ``--max-memory``, subgraph or function nesting, a Loop's trip
    count, parity run time, an archive's size. Exit code 3, like any input unframe won't take."""

    kind = "resource-limit"


class UnsupportedError(UnframeError):
    """The model can't be taken by a stage: unsupported op, attribute, dtype or opset.

    Carries *every* blocker found, not just the first.
    """

    exit_code = 4
    kind = "unsupported"

    def __init__(self, message: str, hint: str = "", *, blockers: list[Blocker] | None = None,
                 details: dict[str, Any] | None = None):
        self.blockers = list(blockers or [])
        d = dict(details or {})
        d["blockers"] = [b.to_dict() for b in self.blockers]
        super().__init__(message, hint, details=d)


class ParityError(UnframeError):
    """A stage's outputs differ from the stage before it beyond tolerance."""

    exit_code = 5
    kind = "parity"

    def __init__(self, message: str, hint: str = "", *, report: Any = None, divergence: Any = None):
        self.report = report
        self.divergence = divergence  # unframe.locate's Divergence, when the locator ran
        details = {"report": report.to_dict()} if report is not None else {}
        if divergence is not None:
            details["divergence"] = divergence.to_dict()
        super().__init__(message, hint, details=details)


class TrustRequiredError(UnframeError):
    """Loading would run code from the model file (pickle, full torch pickle, Keras Lambda)."""

    exit_code = 6
    kind = "trust-required"


class OutputExistsError(UnframeError):
    """The output exists and ``--force`` was not given."""

    exit_code = 7
    kind = "output-exists"


class MissingExtraError(UnframeError):
    """A framework the route needs is not installed."""

    exit_code = 8
    kind = "missing-extra"

    def __init__(self, what: str, extra: str, packages: str = ""):
        pk = f" (installs {packages})" if packages else ""
        super().__init__(
            f"{what} needs the '{extra}' extra, which is not installed",
            f"run: pip install 'unframe[{extra}]'{pk}",
            details={"extra": extra},
        )


class ConversionError(UnframeError):
    """A wrapped tool (exporter, serializer, builder) failed on a model it should take."""

    exit_code = 9
    kind = "conversion"


class RegistryError(UnframeError):
    """A duplicate or malformed registration (a programming error in unframe or a plugin)."""

    exit_code = 10
    kind = "registry"


def _rebuild(cls: type[UnframeError], args: tuple[Any, ...], state: dict[str, Any]) -> UnframeError:
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "internal error (a bug: please report it with --debug output)",
    UsageError.exit_code: "usage: bad option or argument",
    InputError.exit_code: "unreadable or invalid input (missing, corrupt, truncated, unsafe paths)",
    UnsupportedError.exit_code: "unsupported op, attribute, dtype or opset for the target",
    ParityError.exit_code: "parity failure: a stage's numbers differ from the stage before",
    TrustRequiredError.exit_code: "trust required: loading would run code from the model file",
    OutputExistsError.exit_code: "output exists (use --force to replace it)",
    MissingExtraError.exit_code: "missing extra: a framework the route needs is not installed",
    ConversionError.exit_code: "a wrapped tool failed during conversion",
    RegistryError.exit_code: "duplicate or malformed registration (plugin error)",
}

__all__ = [
    "Blocker", "UnframeError", "UsageError", "InputError", "ResourceLimitError", "UnsupportedError",
    "ParityError",
    "TrustRequiredError", "OutputExistsError", "MissingExtraError", "ConversionError",
    "RegistryError", "EXIT_CODES"
]
