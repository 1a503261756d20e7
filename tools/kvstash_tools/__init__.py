"""Python side of kvstash: reference implementations and tooling (keys.py: the prefix keys of docs/format/keys.md)."""
