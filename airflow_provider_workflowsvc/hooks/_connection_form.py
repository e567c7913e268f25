"""The connection form for Airflow 3.0 and 3.1 (the hook's methods), from the provider info's declarations."""

from __future__ import annotations

from typing import Any

from airflow_provider_workflowsvc.get_provider_info import get_provider_info


def _connection_type() -> dict[str, Any]:
    (connection_type,) = get_provider_info()["connection-types"]
    return connection_type


def ui_field_behaviour() -> dict[str, Any]:
    """``ui-field-behaviour`` in the form ``get_ui_field_behaviour`` returns (underscored keys)."""
    declared = _connection_type()["ui-field-behaviour"]
    return {key.replace("-", "_"): value for key, value in declared.items()}


def _field_class(schema: dict[str, Any]) -> str:
    """Return the WTForms field class Airflow < 3.2 accepts for a ``conn-fields`` schema (no float field)."""
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    if schema.get("format") == "password":
        return "PasswordField"
    if "boolean" in types:
        return "BooleanField"
    if "integer" in types:
        return "IntegerField"
    return "StringField"  # strings and numbers: the hook's settings parse "60" or "0.5" as numbers


def form_widgets() -> dict[str, Any]:
    """
    ``conn-fields`` as WTForms fields; none without WTForms (an ImportError would also drop the field
    behaviour: Airflow reads both in one ``try``).
    """
    try:
        import wtforms
        from wtforms.validators import Optional
    except ImportError:
        return {}
    widgets = {}
    for name, field in _connection_type()["conn-fields"].items():
        schema = field["schema"]
        class_name = _field_class(schema)
        default = schema.get("default")
        if class_name == "StringField" and default is not None:
            default = str(default)  # a number shown in a text field
        widgets[name] = getattr(wtforms, class_name)(
            field["label"], validators=[Optional()], description=field.get("description", ""), default=default
        )
    return widgets
