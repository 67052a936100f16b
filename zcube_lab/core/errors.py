"""The one error type for bad configuration: it names the field, the value and what is allowed."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is wrong: `field` got `value`; `allowed` says what would fit."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={value!r} is not valid: {allowed}")
