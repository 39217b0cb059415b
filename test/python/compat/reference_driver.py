"""Run compatibility cases with the reference client (PyPI kcoral==0.1.1).

Run by the reference venv's Python, never imported by the suite: that venv's ``kcoral``
is the reference package, which shares its name with ours. Prints one JSON line per case,
``{"case": name, "outcome": ...}`` (``execute`` against ``--url``) or ``{"case": name,
"wire": ...}`` (with ``--wire``: only the program the reference builder makes).

    python reference_driver.py --url http://127.0.0.1:8000 --nonce N trivial scalars

``--repeat N`` runs the list N times over, for load from the reference client.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

import kcoral
from harness import build_wire, run_case  # type: ignore[import-not-found]
from cases import CASES_BY_NAME  # type: ignore[import-not-found]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--nonce", required=True)
    parser.add_argument("--wire", action="store_true", help="print the wire, run nothing")
    parser.add_argument("--repeat", type=int, default=1, metavar="N",
                        help="run the cases N times over (a line per run)")
    parser.add_argument("cases", nargs="+")
    args = parser.parse_args()
    if not args.wire and not args.url:
        parser.error("--url is needed unless --wire is given")
    for name in args.cases * args.repeat:
        case = CASES_BY_NAME[name]
        if args.wire:
            line = {"case": name, "wire": build_wire(name, kcoral.Program, args.nonce)}
        else:
            try:
                outcome = run_case(case, kcoral.Program, kcoral.Client, args.url, args.nonce)
            except Exception:  # noqa: BLE001 - report and go on with the next case
                outcome = {"driver_error": traceback.format_exc()}
            line = {"case": name, "outcome": outcome}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    sys.exit(main())
