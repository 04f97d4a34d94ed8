"""A config section whose keys, besides its own fields, are the settings sections of registered
components (`policy.<name>`, `placement.<name>`): each validated by the model its component
declares (`config_model`), every problem reported together with its place."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails

from sparkscale.config.base import ConfigSection
from sparkscale.registry import Registry


class SectionedConfig(ConfigSection):
    model_config = ConfigDict(extra="allow", frozen=True)

    registry: ClassVar[Registry[Any]]  # the components whose sections may appear

    @model_validator(mode="wrap")
    @classmethod
    def _sections(cls, data: Any, handler: Any) -> Any:
        """Each section validated by its component's model (every registered component's section
        present), and every problem of the fields and the sections reported together."""
        if not isinstance(data, dict):
            return handler(data)
        out = {name: model() for name in cls.registry.names() if (model := cls.section_model(name)) is not None}
        errors: list[InitErrorDetails] = []
        for key, value in data.items():
            model = None if key in cls.model_fields else cls.section_model(str(key))
            if key in cls.model_fields or isinstance(value, model or ()):
                out[key] = value
            elif model is None:
                errors.append({"type": "extra_forbidden", "loc": (key,), "input": value})
            else:
                try:
                    out[key] = model.model_validate(value)
                except ValidationError as exc:
                    errors += located(exc, (key,))
        try:
            validated = handler(out)
        except ValidationError as exc:
            errors = [*located(exc, ()), *errors]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return validated

    @classmethod
    def section_model(cls, name: str) -> type[BaseModel] | None:
        """The settings model of the component registered as `name` (None: none, or no settings)."""
        try:
            return getattr(cls.registry.get(name), "config_model", None)
        except KeyError:
            return None

    @classmethod
    def section_names(cls) -> list[str]:
        """Every key this section takes: its fields, then the components that have settings."""
        return [*cls.model_fields, *(n for n in cls.registry.names() if cls.section_model(n))]

    def section(self, name: str) -> Any:
        """The settings of component `name`: as configured, else its model's defaults."""
        extra = self.__pydantic_extra__ or {}
        if name in extra:
            return extra[name]
        model = self.section_model(name)
        if model is None:
            raise AttributeError(f"no {self.registry.kind} named {name!r} with settings")
        return model()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            return super().__getattr__(name)  # type: ignore[misc]
        try:
            return self.section(name)
        except AttributeError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None


def located(exc: ValidationError, prefix: tuple[int | str, ...]) -> list[InitErrorDetails]:
    """The errors of `exc`, their locations under `prefix`, ready for `ValidationError.from_exception_data`
    (pydantic otherwise drops a section's name from errors raised inside a validator)."""
    out: list[InitErrorDetails] = []
    for err in exc.errors():
        detail: InitErrorDetails = {"type": err["type"], "loc": (*prefix, *err["loc"]), "input": err.get("input")}
        if "ctx" in err:
            detail["ctx"] = err["ctx"]
        out.append(detail)
    return out
