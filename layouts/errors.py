"""The one error type of the layout algebra.

A `LayoutError` is a `ValueError`: callers that already catch bad values keep working,
and layout code never raises a bare `ValueError` for a user's mistake.
"""


class LayoutError(ValueError):
    """A layout that cannot exist, or an operation a layout does not support."""
