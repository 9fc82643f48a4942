"""Helpers and data for the rule tests: a block-YAML emitter that records the line of every key."""
