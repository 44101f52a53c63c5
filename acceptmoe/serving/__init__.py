"""Serving integrations: the project's verifier-side selection inside other inference servers (SGLang)."""
