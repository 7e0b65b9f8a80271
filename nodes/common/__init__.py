"""Pieces the engines and nodes share: the pack's runtime, model folders, the speak node."""
