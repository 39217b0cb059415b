"""``python -m kcoral``: the ``kcoral`` command (see kcoral._cli)."""

from kcoral._cli import main

raise SystemExit(main())
