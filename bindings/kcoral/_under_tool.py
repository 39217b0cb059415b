"""The environment variable that tells ``kcoral.builtins.benchmark`` a GPU tool runs the program.

``kcoral run ncu`` and ``kcoral run compute-sanitizer`` (the client) set it in the program's
environment; ``benchmark()`` (the server side) then calls its function once, untimed, rather
than compete with the tool for CUPTI. Both sides read the name from here.
"""

UNDER_TOOL_VARIABLE = "KCORAL_UNDER_TOOL"
