"""DeclaredItem directories read into specs, or one-line errors naming file, key and fix."""
