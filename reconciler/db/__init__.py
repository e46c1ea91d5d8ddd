"""PostgreSQL: the store (the only SQL door), named queries, the schema declaration, grants, the embedded server."""
