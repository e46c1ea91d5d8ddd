"""Renderings for people and machines: plan views, tables, explain, masking."""
