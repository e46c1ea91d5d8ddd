"""What a declared file may say: pydantic models per kind, value types, the JSON Schema."""
