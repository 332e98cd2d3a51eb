"""The TUI's screens: loading/error, overview, finding detail, timeline, tables, help."""
