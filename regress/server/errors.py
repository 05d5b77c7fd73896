"""The error answer every view raises: an HTTP status and one readable line."""

from __future__ import annotations

from collections.abc import Mapping


class ApiError(Exception):
    """Sent as {"error": message, "status": status}."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


ERROR_SCHEMA = {
    "type": "object",
    "required": ["error", "status"],
    "properties": {"error": {"type": "string"}, "status": {"type": "integer"}},
}


def error_response(description: str) -> dict[str, object]:
    """An OpenAPI response object for an error status."""
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
