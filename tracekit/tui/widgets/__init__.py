"""The TUI's own widgets: a virtual table over a polars frame and the step timeline."""
