#!python
"""kcoral-server as the kcoral-server wheel installs it: this launcher in the environment's
bin/ (the installer writes its Python into the line above) replaces itself with the binary,
which lies in the kcoral package's folder, kcoral/bin/, beside kcoral-init.

The binary lives there because its shared libraries come with the wheel
(kcoral_server.libs/, found through the binary's RPATH relative to itself), and only files
under site-packages lie at a fixed place relative to those; an environment's bin/ does not.
(kcoral-server/CMakeLists.txt says why the build puts it there.)

The workers' Python, unless --python names one, is this launcher's own, the environment's:
the python3 that kcoral-server would have found beside itself in bin/, ahead of the caller's
$KCORAL_PYTHON. The launcher passes it as $KCORAL_PYTHON, replacing the caller's.
"""

import os
import sys
from importlib.metadata import PackageNotFoundError, distribution

if __name__ == "__main__":
    try:
        binary = str(distribution("kcoral-server").locate_file("kcoral/bin/kcoral-server"))
    except PackageNotFoundError:
        sys.exit(f"kcoral-server: the kcoral-server distribution is not installed for {sys.executable}")
    os.environ["KCORAL_PYTHON"] = sys.executable
    try:
        os.execv(binary, sys.argv)
    except OSError as error:
        sys.exit(f"kcoral-server: cannot run {binary}: {error.strerror}")
