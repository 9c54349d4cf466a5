"""Developer tools (``python -m anygrain.tools.NAME``): the top of the library's layers.

They may import any library module (a tool works across the kinds and model types); no
library module imports them.
"""
