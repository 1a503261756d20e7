"""Python side of kvstash: reference implementations (keys.py: docs/format/keys.md)."""
