"""A Griffe extension for the API site: vecshm's options as plain keyword arguments.

Every facade takes vecshm's options as ``**options: Unpack[VecOptions]`` (``vecshm/options.py``),
each declared once as ``name: Annotated[type, Option(default, doc)]``. Griffe's own
``unpack_typeddict`` extension (listed before this one in mkdocs.yml) expands them into the
signature and its parameters' docs. Before it does, this one gives each option its doc and its
plain type (from the ``Option``); after it, each expanded parameter its default: every facade's
page then shows ``name: type = default`` and the option's doc, as ``help()`` does at run time
(``vecshm.options.takes_options``).
"""

from __future__ import annotations

from typing import Any

import griffe


def _declared(annotation: Any) -> tuple[Any, Any, str] | None:
    """``(type, default, doc)`` of an ``Annotated[type, Option(default, doc)]`` expression, else None."""
    if not isinstance(annotation, griffe.ExprSubscript) or str(annotation.left) != "Annotated":
        return None
    elements = getattr(annotation.slice, "elements", [])
    if len(elements) != 2 or not isinstance(elements[1], griffe.ExprCall) or str(elements[1].function) != "Option":
        return None
    default, doc = elements[1].arguments[:2]
    return elements[0], default, str(doc)[1:-1]  # (the doc's quotes off)


class PlainOptions(griffe.Extension):
    """See the module."""

    def __init__(self) -> None:
        self.defaults: dict[str, Any] = {}  # option -> its default, as declared

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Before the typed dicts are expanded: each option's doc and plain type."""
        self._declare(pkg)

    def _declare(self, obj: griffe.Object) -> None:
        for member in list(obj.members.values()):
            if member.is_alias:
                continue
            if isinstance(member, griffe.Attribute) and (found := _declared(member.annotation)) is not None:
                annotation, default, doc = found
                member.annotation = annotation
                member.docstring = griffe.Docstring(doc, parent=member)
                self.defaults[member.name] = default
            elif isinstance(member, griffe.Class):
                self._inherit(member, obj)
                self._declare(member)
            elif isinstance(member, griffe.Module):
                self._declare(member)

    @staticmethod
    def _inherit(cls: griffe.Class, module: griffe.Object) -> None:
        """A typed dict deriving from another of its module (``StartOptions(VecOptions)``) gets the
        other's options first: the expansion reads a class's own attributes only."""
        inherited = {}
        for base in cls.bases:
            parent = module.members.get(str(base))
            if isinstance(parent, griffe.Class) and not parent.is_alias:
                inherited.update({name: a for name, a in parent.members.items() if isinstance(a, griffe.Attribute)})
        if not inherited:
            return
        own = {name: cls.members[name] for name in list(cls.members)}
        for name in own:
            cls.del_member(name)
        for name, member in {**inherited, **own}.items():
            cls.set_member(name, member)

    def on_function(self, *, func: griffe.Function, **kwargs: Any) -> None:
        """After a ``**options`` was expanded: its options' defaults (``...`` as expanded)."""
        for parameter in func.parameters:
            if parameter.kind is griffe.ParameterKind.keyword_only and parameter.default == "...":
                parameter.default = self.defaults.get(parameter.name, parameter.default)
        for section in func.docstring.parsed if func.docstring else []:
            if section.kind is griffe.DocstringSectionKind.parameters:
                for documented in section.value:
                    if documented.value == "...":
                        documented.value = self.defaults.get(documented.name, documented.value)
