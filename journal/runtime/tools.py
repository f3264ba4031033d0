"""Tools for the runtime: plain functions with a schema taken from their type hints.

``tool(fn)`` inspects ``fn``'s signature, builds a pydantic model of its parameters
(the JSON schema the model sees, and the validator of the model's input), and takes
the description from the docstring. A parameter annotated ``RuntimeContext`` is not
part of the schema: the runtime injects the call's context there.

Public through ``journal`` (and ``journal.runtime``): :class:`ToolSpec`, :class:`Tool`
and :func:`tool`. :func:`to_jsonable` and :func:`result_of` turn a tool's output
into what the journal records.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union, overload

import pydantic
import pydantic_core

from journal.events import ToolResultBlock
from journal.runtime.context import RuntimeContext

__all__ = [
    "Tool",
    "ToolFunction",
    "ToolSpec",
    "printable",
    "result_of",
    "to_jsonable",
    "tool",
    "unrecordable",
]

ToolFunction = Callable[..., Any]
"""A sync or async function usable as a tool."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Returns|Return|Yields|Raises|Examples?|Notes?|"
    r"Attributes):\s*$"
)
_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What a model is told about one tool.

    Attributes:
        name: The tool's name (``[A-Za-z0-9_-]``, at most 64 characters).
        description: What it does; a function's docstring by default.
        input_schema: The JSON schema of its input object.
    """

    name: str
    description: str
    input_schema: dict[str, Any]


def _is_context(annotation: object) -> bool:
    """Whether a parameter asks for the RuntimeContext (``X``, ``X | None``, …)."""
    if annotation is RuntimeContext:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_context(typing.get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(args) == 1 and _is_context(args[0])
    return False


def _arg_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions from a Google-style ``Args:`` section."""
    found: dict[str, str] = {}
    in_args = False
    current: str | None = None
    indent: int | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        heading = _SECTION.match(stripped)
        if heading and len(line) - len(line.lstrip()) == 0:
            in_args = heading.group(1) in ("Args", "Arguments", "Parameters")
            current, indent = None, None
            continue
        if not in_args or not stripped:
            continue
        level = len(line) - len(line.lstrip())
        match = _ARG.match(stripped)
        if match and (indent is None or level <= indent):
            indent = level
            current = match.group(1).lstrip("*")
            found[current] = match.group(2).strip()
        elif current is not None:
            found[current] = (found[current] + " " + stripped).strip()
    return found


def to_jsonable(value: object) -> Any:
    """A JSON-compatible form of a tool's output (``str()`` as a last resort)."""
    try:
        return pydantic_core.to_jsonable_python(value)
    except pydantic_core.PydanticSerializationError:
        return str(value)


class Tool:
    """A function made callable by a model: its spec, validator and invoker.

    Build one with :func:`tool`; ``Agent(tools=...)`` also accepts plain functions.

    Attributes:
        fn: The wrapped function.
        spec: What the model is told (name, description, JSON input schema).
        group: The tool group it belongs to: offered only while that group is
            active (``ToolGroupActivated``); None for always.
        read_only: It changes nothing outside the agent, so plan mode offers it.
    """

    def __init__(
        self,
        fn: ToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
        group: str | None = None,
        read_only: bool = False,
    ) -> None:
        if not callable(fn):
            raise TypeError(f"a tool must be callable, not {type(fn).__name__}")
        if group is not None and (not isinstance(group, str) or not group):
            raise ValueError(f"a tool group must be a non-empty string, not {group!r}")
        self.fn = fn
        self.group = group
        self.read_only = bool(read_only)
        tool_name = name if name is not None else getattr(fn, "__name__", "")
        if not isinstance(tool_name, str) or not _NAME.match(tool_name):
            raise ValueError(
                f"tool name {tool_name!r} must be 1 to 64 characters of "
                "[A-Za-z0-9_-]; pass name= to tool()"
            )
        doc = inspect.getdoc(fn) or ""
        try:
            signature = inspect.signature(fn)
            hints = typing.get_type_hints(fn, include_extras=True)
        except (TypeError, ValueError, NameError) as exc:
            raise TypeError(
                f"cannot read the signature and type hints of tool {tool_name!r}: {exc}"
            ) from exc
        self._context_params: list[str] = []
        self._positional: list[tuple[str, str]] = []
        self._keyword: list[tuple[str, str]] = []
        self._var_keyword = False
        fields: dict[str, Any] = {}
        docs = _arg_docs(doc)
        for index, param in enumerate(signature.parameters.values()):
            annotation = hints.get(param.name, Any)
            if _is_context(annotation):
                self._context_params.append(param.name)
                continue
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                raise TypeError(
                    f"tool {tool_name!r} takes *{param.name}; a tool's input is a "
                    "JSON object, so name every parameter"
                )
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                self._var_keyword = True
                continue
            # Field names are internal; the alias is the parameter's name, so names
            # such as "json" or "model_config" cannot clash with BaseModel's.
            internal = f"p{index}"
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[internal] = (
                annotation,
                pydantic.Field(
                    default, alias=param.name, description=docs.get(param.name)
                ),
            )
            target = (
                self._positional
                if param.kind is inspect.Parameter.POSITIONAL_ONLY
                else self._keyword
            )
            target.append((param.name, internal))
        config = pydantic.ConfigDict(
            extra="allow" if self._var_keyword else "forbid",
            populate_by_name=False,
        )
        try:
            self._model: type[pydantic.BaseModel] = pydantic.create_model(
                f"{tool_name}_input", __config__=config, **fields
            )
            schema = self._model.model_json_schema()
        except (
            pydantic.PydanticUserError,
            pydantic.PydanticSchemaGenerationError,
        ) as e:
            raise TypeError(
                f"cannot build a JSON schema for tool {tool_name!r}: {e}"
            ) from e
        schema.pop("title", None)
        self.spec = ToolSpec(
            tool_name,
            description if description is not None else doc,
            schema,
        )
        self._is_async = _is_async_callable(fn)

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.spec.name

    def validate(self, data: object) -> pydantic.BaseModel:
        """Validate a model's input against the schema.

        Raises:
            pydantic.ValidationError: The input does not match (a ``ValueError``).
        """
        return self._model.model_validate({} if data is None else data)

    async def invoke(self, args: pydantic.BaseModel, ctx: RuntimeContext) -> object:
        """Run the function with validated ``args`` (and ``ctx`` where asked for).

        A sync function runs in a worker thread, so an interrupt need not wait for
        it (the thread itself finishes in the background).
        """
        positional = [getattr(args, internal) for _, internal in self._positional]
        keyword = {name: getattr(args, internal) for name, internal in self._keyword}
        if self._var_keyword and args.model_extra:
            keyword.update(args.model_extra)
        for name in self._context_params:
            keyword[name] = ctx
        if self._is_async:
            result: object = await self.fn(*positional, **keyword)
        else:
            result = await asyncio.to_thread(
                functools.partial(self.fn, *positional, **keyword)
            )
            if inspect.isawaitable(result):
                result = await result
        return result

    def __repr__(self) -> str:
        return f"Tool({self.spec.name!r})"


def _is_async_callable(fn: object) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an object with async __call__
    return inspect.iscoroutinefunction(call)


@overload
def tool(
    fn: ToolFunction | Tool,
    *,
    name: str | None = None,
    description: str | None = None,
    group: str | None = None,
    read_only: bool | None = None,
) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    group: str | None = None,
    read_only: bool | None = None,
) -> Callable[[ToolFunction], Tool]: ...


def tool(
    fn: ToolFunction | Tool | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    group: str | None = None,
    read_only: bool | None = None,
) -> Tool | Callable[[ToolFunction], Tool]:
    """Make a tool of a plain sync or async function.

    The input JSON schema comes from the type hints (through pydantic; ``Annotated``
    with ``pydantic.Field`` adds constraints and descriptions), parameter
    descriptions from a Google-style ``Args:`` section, and the description defaults
    to the docstring. A parameter annotated ``RuntimeContext`` receives the call's
    context and is not part of the schema. Usable as ``tool(fn)``, ``@tool`` or
    ``@tool(name=...)``.

    Args:
        fn: The function (or a Tool to rename or re-describe).
        name: The tool's name (default: the function's ``__name__``).
        description: What the model is told (default: the docstring).
        group: The tool group that must be active for the model to be offered it.
        read_only: Whether plan mode offers it (default False).

    Returns:
        The Tool, or a decorator when ``fn`` is omitted.

    Raises:
        TypeError: ``fn`` is not callable, takes ``*args``, or has hints pydantic
            cannot turn into a JSON schema.
        ValueError: The name is not 1 to 64 characters of ``[A-Za-z0-9_-]``.
    """

    def build(target: ToolFunction | Tool) -> Tool:
        if isinstance(target, Tool):
            return Tool(
                target.fn,
                name=name if name is not None else target.spec.name,
                description=(
                    description if description is not None else target.spec.description
                ),
                group=group if group is not None else target.group,
                read_only=target.read_only if read_only is None else read_only,
            )
        return Tool(
            target,
            name=name,
            description=description,
            group=group,
            read_only=bool(read_only),
        )

    if fn is None:
        return build
    return build(fn)


def printable(value: object) -> str:
    """``str(value)`` as text a record can hold, whatever ``value`` is.

    ``repr`` when ``str`` raises, a placeholder when both do; a lone surrogate
    (which UTF-8 cannot encode: an ``OSError`` naming an undecodable file name)
    is written as its escape.
    """
    for render in (str, repr):
        try:
            text = render(value)
        except Exception:  # noqa: S112 - any failure: the next rendering
            continue
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return f"<unprintable {type(value).__name__}>"


def unrecordable(call_id: str, why: object) -> ToolResultBlock:
    """The error result standing for an output that cannot be recorded."""
    return ToolResultBlock(
        call_id, f"the tool's output could not be recorded: {printable(why)}", True
    )


def result_of(call_id: str, value: object) -> ToolResultBlock:
    """The result block of a tool's return value (a returned block is kept).

    An output that does not convert (nested too deeply, cyclic, bytes that are
    not UTF-8) is an error result saying so, not an exception: the tool has run,
    and its call must get a result.
    """
    try:
        if isinstance(value, ToolResultBlock):
            return ToolResultBlock(call_id, to_jsonable(value.output), value.is_error)
        return ToolResultBlock(call_id, to_jsonable(value))
    except Exception as exc:
        return unrecordable(call_id, exc)
