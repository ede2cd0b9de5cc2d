"""The merge job's error: the window cannot be merged, and nothing was written."""


class MergeJobError(RuntimeError):
    """The window cannot be merged; nothing was written."""
